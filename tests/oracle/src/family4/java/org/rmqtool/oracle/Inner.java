package org.rmqtool.oracle;

/**
 * RocketMQ 4.x keeps the broker's message class in org.apache.rocketmq.store; the rest of the harness
 * compiles against this name in both API families.
 */
class Inner extends org.apache.rocketmq.store.MessageExtBrokerInner {
    static final int FAMILY = 4;
}
