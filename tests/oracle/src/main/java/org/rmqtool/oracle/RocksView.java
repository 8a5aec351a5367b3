package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * What a 5.x broker reads back through its RocksDB consume queue (storeType=defaultRocksDB, or the
 * rocksdbCQDoubleWriteEnable twin beside the file queues): the view's {@code rocksdb_consume_queue}. All of it
 * through the broker's own classes (RocksDBConsumeQueueStore, its RocksDBConsumeQueueTable and
 * RocksDBConsumeQueueOffsetTable), by reflection, since none of them exists in a 4.x build.
 *
 * {@code kind}: "rocksdb" (RocksDBMessageStore: the broker reads only this) or "double_write" (5.3.x
 * DefaultMessageStore.enableRocksdbCQWrite, 5.4+ CombineConsumeQueueStore); {@code read_by_broker}: the kind the
 * broker's reads go to; {@code dir}: the database's directory relative to the store root; {@code checkpoint}:
 * getMaxPhyOffsetInConsumeQueue (the dispatch checkpoint, offset column family, topic CHECKPOINT_TOPIC);
 * {@code offset_table}: every entry RocksDBConsumeQueueOffsetTable.forEach parses (read before anything below,
 * which may correct the min entries); per queue {@code min_offset}/{@code max_offset}
 * (getMinOffsetInQueue/getMaxOffsetInQueue) and {@code units}: getCQInKV for every queue offset from 0 to max-1
 * that has one (offset, commitlog offset, size, tag hash, store time).
 */
final class RocksView {

    static final int SCAN_LIMIT = 200_000;   // queue offsets looked up per queue at most

    static boolean isRocks(Object cq) {
        return cq != null && cq.getClass().getSimpleName().equals("RocksDBConsumeQueue");
    }

    static boolean rocksStoreType(MessageStoreConfig c) {
        Method m = Store.method(MessageStoreConfig.class, "getStoreType", 0);
        try {
            return m != null && "defaultRocksDB".equalsIgnoreCase((String) m.invoke(c));
        } catch (ReflectiveOperationException e) {
            return false;
        }
    }

    static boolean doubleWrite(MessageStoreConfig c) {
        Method m = Store.method(MessageStoreConfig.class, "isRocksdbCQDoubleWriteEnable", 0);
        try {
            return m != null && (Boolean) m.invoke(c);
        } catch (ReflectiveOperationException e) {
            return false;
        }
    }

    /**
     * 5.3.x: the broker (BrokerController.initializeMessageStore) calls enableRocksdbCQWrite on a default store
     * made with rocksdbCQDoubleWriteEnable, before load(). 5.4+ has no such method: DefaultMessageStore's
     * constructor made a CombineConsumeQueueStore itself.
     */
    static void enableDoubleWrite(DefaultMessageStore s, MessageStoreConfig c) throws Exception {
        if (rocksStoreType(c) || !doubleWrite(c)) {
            return;
        }
        Method m = Store.method(s.getClass(), "enableRocksdbCQWrite", 0);
        if (m != null) {
            m.invoke(s);
        }
    }

    static Object field(Object o, String name) throws Exception {
        for (Class<?> k = o.getClass(); k != null; k = k.getSuperclass()) {
            try {
                Field f = k.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // up the hierarchy
            }
        }
        return null;
    }

    /** [the RocksDB consume queue store, kind, the kind the broker reads], or null when the store has none. */
    static Object[] find(DefaultMessageStore s) throws Exception {
        Method qs = Store.method(DefaultMessageStore.class, "getQueueStore", 0);
        Object q = qs == null ? null : qs.invoke(s);
        if (q != null && q.getClass().getSimpleName().equals("RocksDBConsumeQueueStore")) {
            return new Object[] {q, "rocksdb", "rocksdb"};
        }
        if (q != null && q.getClass().getSimpleName().equals("CombineConsumeQueueStore")) {
            Object r = field(q, "rocksDBConsumeQueueStore");
            Object prefer = Store.call(s.getMessageStoreConfig(), "getCombineCQPreferCQType");
            String reads = "defaultRocksDB".equalsIgnoreCase(String.valueOf(prefer)) ? "rocksdb" : "file";
            return r == null ? null : new Object[] {r, "double_write", reads};
        }
        Object other = field(s, "rocksDBMessageStore");   // 5.3.x enableRocksdbCQWrite
        if (other != null) {
            return new Object[] {Store.call(other, "getQueueStore"), "double_write", "file"};
        }
        return null;
    }

    static long checkpoint(Object rs) throws Exception {
        return ((Number) Store.call(rs, "getMaxPhyOffsetInConsumeQueue")).longValue();
    }

    static JsonObject view(DefaultMessageStore s, long commitlogMax) throws Exception {
        Object[] found = find(s);
        if (found == null) {
            return null;
        }
        Object rs = found[0];
        JsonObject o = new JsonObject();
        o.addProperty("kind", (String) found[1]);
        o.addProperty("read_by_broker", (String) found[2]);
        String root = new java.io.File(s.getMessageStoreConfig().getStorePathRootDir()).getCanonicalPath();
        Object path = field(rs, "storePath");
        if (path != null) {
            String p = new java.io.File((String) path).getCanonicalPath();
            o.addProperty("dir", p.startsWith(root + "/") ? p.substring(root.length() + 1) : p);
        }
        // the RocksDB queue is written by its own group commit after the reput hands it the requests: wait until
        // its checkpoint reaches the commitlog's end or stops moving
        long end = System.currentTimeMillis() + 10_000;
        long last = checkpoint(rs);
        long stableSince = System.currentTimeMillis();
        while (last < commitlogMax && System.currentTimeMillis() < end
            && System.currentTimeMillis() - stableSince < 1000) {
            Thread.sleep(20);
            long now = checkpoint(rs);
            if (now != last) {
                last = now;
                stableSince = System.currentTimeMillis();
            }
        }
        o.addProperty("checkpoint", last);

        Object offsets = field(rs, "rocksDBConsumeQueueOffsetTable");
        Object table = field(rs, "rocksDBConsumeQueueTable");
        List<Object> entries = new ArrayList<>();
        Method forEach = Store.method(offsets.getClass(), "forEach", 2);
        Function<Object, Boolean> all = e -> Boolean.TRUE;
        Consumer<Object> keep = entries::add;
        forEach.invoke(offsets, all, keep);
        JsonArray raw = new JsonArray();
        TreeMap<String, Object[]> queues = new TreeMap<>();
        for (Object e : entries) {
            JsonObject r = new JsonObject();
            String topic = (String) e.getClass().getField("topic").get(e);
            int qid = e.getClass().getField("queueId").getInt(e);
            r.addProperty("topic", topic);
            r.addProperty("queue_id", qid);
            r.addProperty("type", String.valueOf(e.getClass().getField("type").get(e)));
            r.addProperty("offset", e.getClass().getField("offset").getLong(e));
            r.addProperty("commitlog_offset", e.getClass().getField("commitLogOffset").getLong(e));
            raw.add(r);
            queues.put(topic + "/" + qid, new Object[] {topic, qid});
        }
        o.add("offset_table", raw);

        JsonObject qs = new JsonObject();
        for (Object[] tq : queues.values()) {
            String topic = (String) tq[0];
            int qid = (Integer) tq[1];
            JsonObject q = new JsonObject();
            long min = ((Number) Store.call(rs, "getMinOffsetInQueue", topic, qid)).longValue();
            long max = ((Number) Store.call(rs, "getMaxOffsetInQueue", topic, qid)).longValue();
            q.addProperty("min_offset", min);
            q.addProperty("max_offset", max);
            JsonArray units = new JsonArray();
            for (long off = 0; off < max && off < SCAN_LIMIT; off++) {
                ByteBuffer b = (ByteBuffer) Store.call(table, "getCQInKV", topic, qid, off);
                if (b == null) {
                    continue;
                }
                JsonObject u = new JsonObject();
                u.addProperty("offset", off);
                u.addProperty("commitlog_offset", b.getLong(0));
                u.addProperty("size", b.getInt(8));
                u.addProperty("tag_hash", b.getLong(12));
                u.addProperty("store_time", b.getLong(20));
                units.add(u);
            }
            q.add("units", units);
            qs.add(topic + "/" + qid, q);
        }
        o.add("queues", qs);
        return o;
    }
}
