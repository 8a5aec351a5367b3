package org.rmqtool.oracle;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/** Creating a DefaultMessageStore of whichever RocketMQ version is on the class path. */
final class Store {

    /** The version the classes were compiled against, as RocketMQ names it (e.g. V4_9_4). */
    static String jarVersion() {
        try {
            return MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION);
        } catch (Throwable e) {
            return "unknown";
        }
    }

    static int major() {
        if (Inner.FAMILY > 0) {
            return Inner.FAMILY;
        }
        String v = System.getProperty("oracle.rocketmq.version", "");
        if (v.isEmpty()) {
            v = jarVersion().replace("V", "").replace('_', '.');
        }
        try {
            return Integer.parseInt(v.split("\\.")[0]);
        } catch (NumberFormatException e) {
            return 4;
        }
    }

    static void checkVersion(String asked) {
        String built = System.getProperty("oracle.rocketmq.version");
        if (built != null && !built.equals(asked)) {
            throw new Main.UsageError("this JVM runs RocketMQ " + built + ", not " + asked);
        }
    }

    /** Settings the harness makes before the caller's (the caller may override all but the paths). */
    static MessageStoreConfig config(JsonObject cfg, Path root) {
        MessageStoreConfig c = new MessageStoreConfig();
        trySet(c, "haListenPort", 0);            // never collide with another store on this machine
        trySet(c, "fileReservedTime", 24 * 365 * 10);
        trySet(c, "diskMaxUsedSpaceRatio", 95);
        trySet(c, "cleanFileForciblyEnable", false);
        for (Map.Entry<String, JsonElement> e : cfg.entrySet()) {
            String k = e.getKey();
            if (k.equals("storePathRootDir") || k.equals("storePathCommitLog") || k.equals("from")
                || k.equals(TOPIC_ATTRIBUTES)) {
                continue;
            }
            set(c, k, e.getValue());
        }
        c.setStorePathRootDir(root.toString());
        c.setStorePathCommitLog(root.resolve("commitlog").toString());
        trySet(c, "storePathEpochFile", root.resolve("epochFileCheckpoint").toString());
        trySet(c, "storePathBrokerIdentity", root.resolve("brokerIdentity").toString());
        DLedger.configure(c, cfg);
        return c;
    }

    static Method setter(Object o, String key) {
        String name = "set" + Character.toUpperCase(key.charAt(0)) + key.substring(1);
        // (the DLedger settings keep their lower-case second letter: setdLegerSelfId)
        String literal = "set" + key;
        for (Method m : o.getClass().getMethods()) {
            if ((m.getName().equals(name) || m.getName().equals(literal)) && m.getParameterCount() == 1) {
                return m;
            }
        }
        return null;
    }

    static void trySet(Object o, String key, Object value) {
        Method m = setter(o, key);
        if (m != null) {
            try {
                m.invoke(o, value);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static void set(Object o, String key, JsonElement v) {
        Method m = setter(o, key);
        if (m == null) {
            throw new Main.UsageError("unknown MessageStoreConfig setting " + key + " for RocketMQ " + jarVersion());
        }
        Class<?> t = m.getParameterTypes()[0];
        Object val;
        try {
            if (t == int.class || t == Integer.class) {
                val = v.getAsInt();
            } else if (t == long.class || t == Long.class) {
                val = v.getAsLong();
            } else if (t == boolean.class || t == Boolean.class) {
                val = v.getAsBoolean();
            } else if (t == double.class || t == Double.class) {
                val = v.getAsDouble();
            } else if (t == float.class || t == Float.class) {
                val = v.getAsFloat();
            } else if (t == short.class || t == Short.class) {
                val = v.getAsShort();
            } else if (t == String.class) {
                val = v.getAsString();
            } else if (t.isEnum()) {
                val = Enum.valueOf((Class<Enum>) t, v.getAsString());
            } else {
                throw new Main.UsageError("MessageStoreConfig setting " + key + " has type " + t.getName() + " which the harness cannot set");
            }
            m.invoke(o, val);
        } catch (Main.UsageError e) {
            throw e;
        } catch (Exception e) {
            throw new Main.UsageError("bad value " + v + " for MessageStoreConfig setting " + key + ": " + e);
        }
    }

    /** The config key (not a MessageStoreConfig setting) naming topics and their attributes, for 5.x. */
    static final String TOPIC_ATTRIBUTES = "topic_attributes";

    /**
     * The broker's topic config table as the store sees it (5.x: DefaultMessageStore's constructor takes
     * it; the consume queue store reads each topic's queue.type from it): {@code {"T": {"queue.type":
     * "BatchCQ"}}} in the config under {@value #TOPIC_ATTRIBUTES}. TopicConfig.setAttributes is 5.x only:
     * reflection, so that the 4.x build compiles.
     */
    static ConcurrentHashMap<String, Object> topics(JsonObject cfg) throws Exception {
        ConcurrentHashMap<String, Object> table = new ConcurrentHashMap<>();
        if (cfg == null || !cfg.has(TOPIC_ATTRIBUTES)) {
            return table;
        }
        Class<?> tc = Class.forName("org.apache.rocketmq.common.TopicConfig");
        for (Map.Entry<String, JsonElement> t : cfg.getAsJsonObject(TOPIC_ATTRIBUTES).entrySet()) {
            Map<String, String> attrs = new java.util.HashMap<>();
            for (Map.Entry<String, JsonElement> a : t.getValue().getAsJsonObject().entrySet()) {
                attrs.put(a.getKey(), a.getValue().getAsString());
            }
            Object conf = tc.getConstructor(String.class).newInstance(t.getKey());
            Method set = method(tc, "setAttributes", 1);
            if (set == null) {
                throw new Main.UsageError(TOPIC_ATTRIBUTES + " needs RocketMQ 5.x (TopicConfig has no attributes in "
                    + jarVersion() + ")");
            }
            set.invoke(conf, attrs);
            table.put(t.getKey(), conf);
        }
        return table;
    }

    static DefaultMessageStore open(MessageStoreConfig c) throws Exception {
        return open(c, (JsonObject) null);
    }

    /** A store with the harness's BrokerConfig and the topic config table of {@code cfg}. */
    static DefaultMessageStore open(MessageStoreConfig c, JsonObject cfg) throws Exception {
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        return open(c, bc, topics(cfg));
    }

    /** A store with the caller's BrokerConfig (Ha: brokerId, enableControllerMode). */
    static DefaultMessageStore open(MessageStoreConfig c, BrokerConfig bc) throws Exception {
        return open(c, bc, new ConcurrentHashMap<>());
    }

    static DefaultMessageStore open(MessageStoreConfig c, BrokerConfig bc, ConcurrentHashMap<String, Object> topicTable)
        throws Exception {
        new File(c.getStorePathRootDir()).mkdirs();
        Object listener = null;
        Class<?> lc = Class.forName("org.apache.rocketmq.store.MessageArrivingListener");
        listener = Proxy.newProxyInstance(Store.class.getClassLoader(), new Class<?>[] {lc}, (p, m, a) -> {
            if (m.getName().equals("hashCode")) {
                return 0;
            }
            if (m.getName().equals("equals")) {
                return p == a[0];
            }
            return null;
        });
        Class<?> storeClass = DefaultMessageStore.class;
        if (RocksView.rocksStoreType(c)) {
            // storeType=defaultRocksDB: the broker (BrokerController.initializeMessageStore) makes a
            // RocksDBMessageStore, whose consume queues are a RocksDB database under consumequeue/
            storeClass = Class.forName("org.apache.rocketmq.store.RocksDBMessageStore");
        }
        for (Constructor<?> k : storeClass.getConstructors()) {
            Class<?>[] ps = k.getParameterTypes();
            if (ps.length == 4 && ps[0] == MessageStoreConfig.class) {
                DefaultMessageStore s = (DefaultMessageStore) k.newInstance(c, null, listener, bc);
                if (!topicTable.isEmpty()) {
                    // 5.0.0 takes the table through a setter (passed on to its ConsumeQueueStore)
                    Method set = method(DefaultMessageStore.class, "setTopicConfigTable", 1);
                    if (set == null) {
                        throw new Main.UsageError(TOPIC_ATTRIBUTES + " needs RocketMQ 5.x (no topic config table in "
                            + jarVersion() + ")");
                    }
                    set.invoke(s, topicTable);
                }
                RocksView.enableDoubleWrite(s, c);
                return s;
            }
            if (ps.length == 5 && ps[0] == MessageStoreConfig.class && ps[4] == java.util.concurrent.ConcurrentMap.class) {
                DefaultMessageStore s = (DefaultMessageStore) k.newInstance(c, null, listener, bc, topicTable);
                RocksView.enableDoubleWrite(s, c);
                return s;
            }
        }
        throw new IllegalStateException("no DefaultMessageStore constructor the harness knows");
    }

    /** Wait until the reput service has dispatched everything up to the commitlog's max offset. */
    static boolean waitReput(DefaultMessageStore s, long timeoutMs) throws InterruptedException {
        long end = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < end) {
            if (s.dispatchBehindBytes() <= 0) {
                return true;
            }
            Thread.sleep(5);
        }
        return s.dispatchBehindBytes() <= 0;
    }

    static Object call(Object o, String name, Object... args) throws Exception {
        for (Method m : o.getClass().getMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == args.length) {
                return m.invoke(o, args);
            }
        }
        throw new NoSuchMethodException(name);
    }

    static Method method(Class<?> c, String name, int n) {
        for (Method m : c.getMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == n) {
                return m;
            }
        }
        return null;
    }
}
