package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.SelectMappedBufferResult;

import java.io.File;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * What a 5.x broker reads back through its BatchConsumeQueues (topics whose queue.type is BatchCQ, kept in
 * batchconsumequeue/): the view's {@code batch_consume_queues}. Everything goes through reflection, since
 * BatchConsumeQueue, CqUnit and the 5.x MappedFile exist in neither 4.x build.
 *
 * Per queue: the queue's own figures (getMinOffsetInQueue, getMaxOffsetInQueue, getMaxPhysicOffset,
 * getMinLogicOffset), {@code units}: every 46-byte unit of its mapped files up to each file's read position
 * (the files as the broker's recovery left them), {@code lookups}: get(q) for every queue offset from min-1
 * to max (the unit the broker answers with, or null), {@code by_time}: getOffsetInQueueByTime for every
 * unit's store time and one millisecond either side, 0 and Long.MAX_VALUE.
 */
final class BatchView {

    static final int UNIT = 46;   // BatchConsumeQueue.CQ_STORE_UNIT_SIZE in every 5.x release

    static boolean isBatch(Object cq) {
        return cq != null && cq.getClass().getSimpleName().equals("BatchConsumeQueue");
    }

    static JsonObject view(DefaultMessageStore s) throws Exception {
        JsonObject o = new JsonObject();
        Map<String, ? extends Map<Integer, ?>> table = s.getConsumeQueueTable();
        TreeMap<String, Object> sorted = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : table.entrySet()) {
            for (Map.Entry<Integer, ?> q : t.getValue().entrySet()) {
                if (isBatch(q.getValue())) {
                    sorted.put(t.getKey() + "/" + q.getKey(), q.getValue());
                }
            }
        }
        for (Map.Entry<String, Object> e : sorted.entrySet()) {
            o.add(e.getKey(), queue(s, e.getValue()));
        }
        return o;
    }

    static long lng(Object o, String m, Object... args) throws Exception {
        return ((Number) Store.call(o, m, args)).longValue();
    }

    static JsonObject queue(DefaultMessageStore s, Object bcq) throws Exception {
        JsonObject q = new JsonObject();
        long min = lng(bcq, "getMinOffsetInQueue");
        long max = lng(bcq, "getMaxOffsetInQueue");
        q.addProperty("min_offset", min);
        q.addProperty("max_offset", max);
        q.addProperty("max_physic_offset", lng(bcq, "getMaxPhysicOffset"));
        q.addProperty("min_logic_offset", lng(bcq, "getMinLogicOffset"));
        Object mfq = Store.call(bcq, "getMappedFileQueue");
        JsonArray units = new JsonArray();
        TreeSet<Long> times = new TreeSet<>();
        for (Object mf : (List<?>) Store.call(mfq, "getMappedFiles")) {
            String name = new File((String) Store.call(mf, "getFileName")).getName();
            long from = lng(mf, "getFileFromOffset");
            SelectMappedBufferResult r = (SelectMappedBufferResult) Store.call(mf, "selectMappedBuffer", 0);
            if (r == null) {
                continue;
            }
            try {
                ByteBuffer b = r.getByteBuffer();
                for (int p = 0; p + UNIT <= r.getSize(); p += UNIT) {
                    JsonObject u = new JsonObject();
                    u.addProperty("file", name);
                    u.addProperty("logic_offset", from + p);
                    long phys = b.getLong(p);
                    int size = b.getInt(p + 8);
                    long store = b.getLong(p + 20);
                    u.addProperty("offset", phys);
                    u.addProperty("size", size);
                    u.addProperty("tags_code", b.getLong(p + 12));
                    u.addProperty("store_time", store);
                    u.addProperty("msg_base_offset", b.getLong(p + 28));
                    u.addProperty("batch_size", b.getShort(p + 36));
                    u.addProperty("compacted_offset", b.getInt(p + 38));
                    u.addProperty("reserved", b.getInt(p + 42));
                    u.add("message", message(s, phys, size));
                    units.add(u);
                    times.add(store);
                }
            } finally {
                r.release();
            }
        }
        q.add("units", units);
        JsonArray lookups = new JsonArray();
        for (long i = Math.max(min - 1, -1); i <= max; i++) {
            JsonObject l = new JsonObject();
            l.addProperty("queue_offset", i);
            Object u = null;
            try {
                u = Store.call(bcq, "get", i);
            } catch (Exception ex) {
                l.addProperty("threw", String.valueOf(ex.getCause() != null ? ex.getCause() : ex));
            }
            if (u == null) {
                l.add("unit", JsonNull.INSTANCE);
            } else {
                JsonObject cu = new JsonObject();
                cu.addProperty("queue_offset", lng(u, "getQueueOffset"));
                cu.addProperty("pos", lng(u, "getPos"));
                cu.addProperty("size", lng(u, "getSize"));
                cu.addProperty("tags_code", lng(u, "getTagsCode"));
                cu.addProperty("batch_num", lng(u, "getBatchNum"));
                cu.addProperty("compacted_offset", lng(u, "getCompactedOffset"));
                l.add("unit", cu);
            }
            lookups.add(l);
        }
        q.add("lookups", lookups);
        TreeSet<Long> asked = new TreeSet<>();
        asked.add(0L);
        asked.add(Long.MAX_VALUE);
        for (long t : times) {
            asked.add(t - 1);
            asked.add(t);
            asked.add(t + 1);
        }
        JsonArray byTime = new JsonArray();
        for (long t : asked) {
            JsonObject l = new JsonObject();
            l.addProperty("timestamp", t);
            l.addProperty("offset", lng(bcq, "getOffsetInQueueByTime", t));
            byTime.add(l);
        }
        q.add("by_time", byTime);
        return q;
    }

    /** The record a unit points to, as lookMessageByOffset decodes it (null if unreadable). */
    static com.google.gson.JsonElement message(DefaultMessageStore s, long phys, int size) {
        MessageExt m;
        try {
            m = s.lookMessageByOffset(phys, size);
        } catch (Throwable ignored) {
            m = null;
        }
        if (m == null) {
            return JsonNull.INSTANCE;
        }
        JsonObject mm = new JsonObject();
        mm.addProperty("topic", m.getTopic());
        mm.addProperty("queue_id", m.getQueueId());
        mm.addProperty("queue_offset", m.getQueueOffset());
        mm.addProperty("store_size", m.getStoreSize());
        mm.addProperty("sys_flag", m.getSysFlag());
        mm.addProperty("inner_num", m.getProperty("INNER_NUM"));
        mm.addProperty("inner_base", m.getProperty("INNER_BASE"));
        mm.addProperty("uniq_key", m.getProperty("UNIQ_KEY"));
        mm.addProperty("body_sha256", Viewer.sha256(m.getBody()));
        return mm;
    }
}
