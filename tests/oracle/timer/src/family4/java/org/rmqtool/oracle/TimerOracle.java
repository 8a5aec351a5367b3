package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Map;
import java.util.concurrent.ConcurrentMap;

/**
 * The timer oracle's 4.x side: delay-level messages, which the 4.x store's own
 * ScheduleMessageService (rocketmq-store) delivers. {@code view} opens a copy of the store with
 * DefaultMessageStore of the release (load: the recovery and the schedule service's load with
 * correctDelayOffset), starts it as a master (start() starts the schedule service), waits until
 * every delay level's offset passed its last entry due at the start, and reports what the
 * commitlog gained and the delay offsets and queues before and after. 4.x has no timer store.
 *
 * <pre>timer-oracle view --version V [--config C.json] STORE</pre>
 */
public final class TimerOracle {

    static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";

    private TimerOracle() {
    }

    public static void main(String[] args) {
        PrintStream out = System.out;
        System.setOut(System.err);
        int rc;
        try {
            rc = run(args, out);
        } catch (Main.UsageError e) {
            System.err.println("timer-oracle: " + e.getMessage());
            rc = 2;
        } catch (Throwable e) {
            System.err.println("timer-oracle: " + Main.describe(e));
            e.printStackTrace(System.err);
            rc = 3;
        }
        out.flush();
        Runtime.getRuntime().halt(rc);
    }

    static String opt(String[] a, String name) {
        for (int i = 0; i + 1 < a.length; i++) {
            if (a[i].equals(name)) {
                return a[i + 1];
            }
        }
        return null;
    }

    static int run(String[] a, PrintStream out) throws Exception {
        String version = opt(a, "--version");
        if (a.length == 0 || version == null) {
            throw new Main.UsageError("usage: timer-oracle view --version V [--config C.json] STORE");
        }
        Store.checkVersion(version);
        if (!a[0].equals("view")) {
            throw new Main.UsageError("4.x: only view (write 4.x stores with rocketmq-oracle write)");
        }
        String cfgPath = opt(a, "--config");
        JsonObject cfg = cfgPath == null ? new JsonObject() : Main.readJson(cfgPath).getAsJsonObject();
        Path tmp = Files.createTempDirectory("timer-oracle-view-");
        Path root = tmp.resolve("store");
        try {
            Viewer.copyTree(Paths.get(a[a.length - 1]), root);
            Json.print(out, view(version, cfg, root));
        } finally {
            Main.deleteTree(tmp);
        }
        return 0;
    }

    static JsonObject view(String version, JsonObject cfg, Path root) throws Exception {
        JsonObject v = new JsonObject();
        v.addProperty("rocketmq_version", version);
        v.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        long startMs = System.currentTimeMillis();
        v.addProperty("start_ms", startMs);
        MessageStoreConfig c = Store.config(cfg, root);
        DefaultMessageStore s = Store.open(c);
        if (!s.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed");
        }
        Object sms = Store.call(s, "getScheduleMessageService");
        v.add("schedule_after_load", scheduleState(s, sms));
        long mark = s.getMaxPhyOffset();
        s.start();  // a master: handleScheduleMessageService starts the schedule service
        long end = System.currentTimeMillis() + 120_000;
        int stable = 0;
        while (stable < 3) {
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("the schedule service did not deliver within 120 s");
            }
            stable = Store.waitReput(s, 1000) && done(s, sms, startMs) ? stable + 1 : 0;
            Thread.sleep(200);
        }
        Store.call(sms, "shutdown");  // stops delivering, persists config/delayOffset.json
        Store.waitReput(s, 60_000);
        JsonObject r = new JsonObject();
        r.addProperty("cutoff_ms", startMs);
        r.addProperty("commitlog_max_offset_before", mark);
        r.addProperty("commitlog_max_offset_after", s.getMaxPhyOffset());
        JsonArray recs = new JsonArray();
        Viewer.walk(s, c, mark, s.getMaxPhyOffset(), recs, new long[] {-1});
        r.add("records", recs);
        v.add("run", r);
        v.add("schedule_after_run", scheduleState(s, sms));
        JsonArray before = new JsonArray();
        Viewer.walk(s, c, s.getMinPhyOffset(), mark, before, new long[] {-1});
        v.add("records_before_run", before);
        QuickShutdown.run(s::shutdown);
        return v;
    }

    @SuppressWarnings("unchecked")
    static ConcurrentMap<Integer, Long> offsets(Object sms) throws Exception {
        Field f = sms.getClass().getDeclaredField("offsetTable");
        f.setAccessible(true);
        return (ConcurrentMap<Integer, Long>) f.get(sms);
    }

    /** Every level's offset passed its last entry due at the cutoff (queue order). */
    static boolean done(DefaultMessageStore s, Object sms, long cutoff) throws Exception {
        ConcurrentMap<Integer, Long> off = offsets(sms);
        for (int q = 0; q < 64; q++) {
            ConsumeQueue cq = s.findConsumeQueue(SCHEDULE_TOPIC, q);
            if (cq == null || cq.getMaxOffsetInQueue() <= 0) {
                continue;
            }
            Long at = off.get(q + 1);
            long from = Math.max(at == null ? 0 : at, cq.getMinOffsetInQueue());
            if (from < cq.getMaxOffsetInQueue() && tagsCode(cq, from) <= cutoff) {
                return false;
            }
        }
        return true;
    }

    static long tagsCode(ConsumeQueue cq, long offset) {
        SelectMappedBufferResult b = cq.getIndexBuffer(offset);
        if (b == null) {
            return Long.MAX_VALUE;
        }
        try {
            b.getByteBuffer().getLong();
            b.getByteBuffer().getInt();
            return b.getByteBuffer().getLong();
        } finally {
            b.release();
        }
    }

    static JsonObject scheduleState(DefaultMessageStore s, Object sms) throws Exception {
        JsonObject o = new JsonObject();
        JsonObject off = new JsonObject();
        for (Map.Entry<Integer, Long> e : offsets(sms).entrySet()) {
            off.addProperty(String.valueOf(e.getKey()), e.getValue());
        }
        o.add("offset_table", off);
        JsonObject queues = new JsonObject();
        for (int q = 0; q < 64; q++) {
            ConsumeQueue cq = s.findConsumeQueue(SCHEDULE_TOPIC, q);
            if (cq == null || cq.getMaxOffsetInQueue() <= 0) {
                continue;
            }
            JsonObject qo = new JsonObject();
            qo.addProperty("min_offset", cq.getMinOffsetInQueue());
            qo.addProperty("max_offset", cq.getMaxOffsetInQueue());
            JsonArray es = new JsonArray();
            for (long i = cq.getMinOffsetInQueue(); i < cq.getMaxOffsetInQueue(); i++) {
                SelectMappedBufferResult b = cq.getIndexBuffer(i);
                if (b == null) {
                    continue;
                }
                long pos;
                int size;
                long tags;
                try {
                    pos = b.getByteBuffer().getLong();
                    size = b.getByteBuffer().getInt();
                    tags = b.getByteBuffer().getLong();
                } finally {
                    b.release();
                }
                MessageExt m = s.lookMessageByOffset(pos, size);
                JsonObject e = new JsonObject();
                e.addProperty("queue_offset", i);
                e.addProperty("deliver_ms", tags);
                e.addProperty("uniq_key", m == null ? null : m.getProperty("UNIQ_KEY"));
                es.add(e);
            }
            qo.add("entries", es);
            queues.add(String.valueOf(q), qo);
        }
        o.add("queues", queues);
        return o;
    }
}
