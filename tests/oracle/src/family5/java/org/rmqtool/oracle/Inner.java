package org.rmqtool.oracle;

/**
 * RocketMQ 5.x keeps the broker's message class in org.apache.rocketmq.common.message; the rest of the harness
 * compiles against this name in both API families.
 */
class Inner extends org.apache.rocketmq.common.message.MessageExtBrokerInner {
    static final int FAMILY = 5;
}
