package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.timer.Slot;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerLog;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerWheel;

import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentMap;

/**
 * The timer oracle (5.x): timer and delay-level messages written and delivered by the broker
 * module's own classes. A BrokerController (rocketmq-broker of the release) is initialised on the
 * store (its initialize(): the topic and offset managers, DefaultMessageStore, TimerCheckpoint,
 * TimerMetrics and TimerMessageStore, ScheduleMessageService, and the put hooks, among them
 * HookUtils.handleScheduleMessage, the rewrite of timer and delay-level messages); messages go
 * through MessageStore.putMessage, so its hooks rewrite them as the broker's send path does. Of
 * BrokerController.start() only the store's services are started (the message store, the timer
 * store, the schedule service as changeScheduleServiceStatus does), never a network server.
 *
 * <pre>
 * timer-oracle write --version V --scenario S.json --out DIR
 * timer-oracle view  --version V [--config C.json] [--run | --start-stop] STORE
 * </pre>
 * See tests/oracle/README.md, "The timer oracle".
 */
public final class TimerOracle {

    static final String TIMER_TOPIC = "rmq_sys_wheel_timer";
    static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";

    private TimerOracle() {
    }

    public static void main(String[] args) {
        PrintStream out = System.out;
        System.setOut(System.err);  // the broker's own console output must not reach stdout
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
        Runtime.getRuntime().halt(rc);  // non-daemon broker threads must not keep the JVM alive
    }

    static String opt(String[] a, String name) {
        for (int i = 0; i + 1 < a.length; i++) {
            if (a[i].equals(name)) {
                return a[i + 1];
            }
        }
        return null;
    }

    static boolean flag(String[] a, String name) {
        for (String s : a) {
            if (s.equals(name)) {
                return true;
            }
        }
        return false;
    }

    static int run(String[] a, PrintStream out) throws Exception {
        if (a.length == 0) {
            throw new Main.UsageError("usage: timer-oracle write|view ...");
        }
        String version = opt(a, "--version");
        if (version == null) {
            throw new Main.UsageError(a[0] + " needs --version");
        }
        Store.checkVersion(version);
        if (a[0].equals("write")) {
            JsonObject scen = Main.readJson(need(opt(a, "--scenario"), "--scenario")).getAsJsonObject();
            Path dir = Paths.get(need(opt(a, "--out"), "--out"));
            JsonObject res = write(version, scen, dir);
            try (java.io.Writer w = new OutputStreamWriter(new FileOutputStream(dir.resolve("result.json").toFile()),
                StandardCharsets.UTF_8)) {
                Json.write(w, res, true);
            }
            if (res.has("kill") && res.get("kill").getAsBoolean()) {
                // a process kill: no shutdown, no flush; what the mapped files hold is on disk
                Runtime.getRuntime().halt(137);
            }
            return 0;
        }
        if (a[0].equals("view")) {
            String cfgPath = opt(a, "--config");
            JsonObject cfg = cfgPath == null ? new JsonObject() : Main.readJson(cfgPath).getAsJsonObject();
            Path store = Paths.get(a[a.length - 1]);
            String mode = flag(a, "--start-stop") ? "start-stop" : "run";
            JsonObject v = view(version, cfg, store, mode);
            Json.print(out, v);
            return 0;
        }
        throw new Main.UsageError("unknown verb " + a[0] + " (write, view)");
    }

    static String need(String v, String what) {
        if (v == null) {
            throw new Main.UsageError("missing " + what);
        }
        return v;
    }

    // ---------------------------------------------------------------- the broker

    /** A BrokerController on root, initialised (its load and recovery), nothing started. */
    static BrokerController open(JsonObject cfg, Path root) throws Exception {
        Files.createDirectories(root);
        MessageStoreConfig c = Store.config(cfg, root);
        BrokerConfig b = new BrokerConfig();
        b.setLongPollingEnable(false);
        NettyServerConfig n = new NettyServerConfig();
        n.setListenPort(0);
        BrokerController bc = new BrokerController(b, n, new NettyClientConfig(), c);
        if (!bc.initialize()) {
            throw new IllegalStateException("BrokerController.initialize() failed");
        }
        return bc;
    }

    /**
     * MessageStoreConfig.timerStopDequeue (read by every TimerMessageStore.dequeue() call) has no
     * setter in 5.1.4, so no broker configuration sets it; the harness sets the field to hold the
     * dequeue where it must not deliver yet (the timer keeps enqueueing, flushing and checkpointing).
     */
    static void holdDequeue(MessageStoreConfig c, boolean hold) {
        try {
            java.lang.reflect.Field f = MessageStoreConfig.class.getDeclaredField("timerStopDequeue");
            f.setAccessible(true);
            f.setBoolean(c, hold);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot hold the timer's dequeue: " + e);
        }
    }

    static MessageStoreConfig msc(BrokerController bc) {
        return bc.getMessageStoreConfig();
    }

    /** The services BrokerController.start() starts for the store: message store, timer store. */
    static void startStore(BrokerController bc) throws Exception {
        bc.getMessageStore().start();
        TimerMessageStore t = bc.getTimerMessageStore();
        if (t != null) {
            // a master: BrokerController.start() starts the timer, then changeScheduleServiceStatus(true)
            // sets shouldRunningDequeue (and starts the schedule service, which the harness starts only
            // where a step asks for deliveries). The harness sets it first (TimerMessageStore.start(true)):
            // in the broker's window between the two the enqueue may put an already-due message into the
            // wheel instead of delivering it at once, which moves every later timer log unit
            t.start(true);
        }
    }

    static void shutdown(BrokerController bc) {
        // BrokerController.shutdownBasicService's order for the store's part: the timer store first,
        // the schedule service (persist, stop), then the message store
        TimerMessageStore t = bc.getTimerMessageStore();
        if (t != null) {
            t.shutdown();
        }
        Object sms = bc.getScheduleMessageService();
        try {
            Store.call(sms, "persist");
            Store.call(sms, "shutdown");
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
        QuickShutdown.run(() -> bc.getMessageStore().shutdown());
    }

    // ---------------------------------------------------------------- messages

    /** The client's Message and SendMessageProcessor's MessageExtBrokerInner, before the put hooks. */
    static Inner build(JsonObject m, int seq) throws Exception {
        String topic = Put.str(m, "topic", "TopicA");
        int queueId = (int) Put.lng(m, "queue_id", 0);
        byte[] body = Put.body(m);
        Message cm = new Message(topic, Put.str(m, "tags", null), Put.str(m, "keys", null), 0, body, true);
        if (m.has("properties")) {
            for (Map.Entry<String, JsonElement> e : m.getAsJsonObject("properties").entrySet()) {
                MessageAccessor.putProperty(cm, e.getKey(), e.getValue().getAsString());
            }
        }
        int delay = (int) Put.lng(m, "delay_level", 0);
        if (delay > 0) {
            cm.setDelayTimeLevel(delay);
        }
        // the client's setDeliverTimeMs / setDelayTimeSec / setDelayTimeMs
        if (m.has("timer_deliver_in_ms")) {
            cm.setDeliverTimeMs(System.currentTimeMillis() + m.get("timer_deliver_in_ms").getAsLong());
        }
        if (m.has("timer_deliver_ms")) {
            cm.setDeliverTimeMs(m.get("timer_deliver_ms").getAsLong());
        }
        if (m.has("timer_delay_sec")) {
            cm.setDelayTimeSec(m.get("timer_delay_sec").getAsLong());
        }
        if (m.has("timer_delay_ms")) {
            cm.setDelayTimeMs(m.get("timer_delay_ms").getAsLong());
        }
        if (!m.has("uniq_key")) {
            MessageClientIDSetter.setUniqID(cm);
        } else if (!m.get("uniq_key").isJsonNull()) {
            MessageAccessor.putProperty(cm, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, m.get("uniq_key").getAsString());
        }
        String wire = MessageDecoder.messageProperties2String(cm.getProperties());
        Inner in = new Inner();
        in.setTopic(topic);
        in.setQueueId(queueId);
        in.setSysFlag(0);
        in.setBody(body);
        in.setFlag(0);
        Map<String, String> orig = MessageDecoder.string2messageProperties(wire);
        MessageAccessor.setProperties(in, orig);
        in.setBornTimestamp(System.currentTimeMillis());
        in.setBornHost(Put.addr(Put.str(m, "born_host", "10.0.0.1:40000")));
        in.setStoreHost(Put.addr(Put.str(m, "store_host", "192.168.0.10:10911")));
        in.setReconsumeTimes(0);
        MessageAccessor.putProperty(in, MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
        String w = orig.remove(MessageConst.PROPERTY_WAIT_STORE_MSG_OK);
        in.setPropertiesString(MessageDecoder.messageProperties2String(in.getProperties()));
        if (w != null) {
            orig.put(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, w);
        }
        in.setTagsCode(Inner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, in.getTags()));
        return in;
    }

    // ---------------------------------------------------------------- write

    static JsonObject write(String version, JsonObject scen, Path dir) throws Exception {
        Path root = dir.resolve("store");
        if (Files.isDirectory(root) && Files.list(root).findAny().isPresent()) {
            throw new Main.UsageError("write: " + root + " exists and is not empty");
        }
        JsonObject cfg = scen.has("config") ? scen.getAsJsonObject("config") : new JsonObject();
        BrokerController bc = open(cfg, root);
        MessageStoreConfig c = msc(bc);
        // the timer enqueues (timer log, wheel) but delivers only in a "deliver" step
        holdDequeue(c, true);
        startStore(bc);
        JsonArray msgs = new JsonArray();
        JsonArray deliveries = new JsonArray();
        JsonArray steps = scen.has("steps") ? scen.getAsJsonArray("steps") : new JsonArray();
        int seq = 0;
        for (JsonElement se : steps) {
            JsonObject st = se.getAsJsonObject();
            if (st.has("put")) {
                for (JsonElement me : st.getAsJsonArray("put")) {
                    msgs.add(putOne(bc, me.getAsJsonObject(), seq++));
                }
                waitEnqueued(bc, 60_000);
            } else if (st.has("deliver")) {
                JsonObject d = st.getAsJsonObject("deliver");
                long waitMs = d.has("after_ms") ? d.get("after_ms").getAsLong() : 0;
                if (waitMs > 0) {
                    Thread.sleep(waitMs);
                }
                deliveries.add(deliver(bc, System.currentTimeMillis(), bc.getMessageStore().getMaxPhyOffset()));
            } else if (st.has("sleep_ms")) {
                Thread.sleep(st.get("sleep_ms").getAsLong());
            } else if (st.has("flush")) {
                // one more round of the TimerFlushService (checkpoint, timer log, wheel)
                Thread.sleep(c.getTimerFlushIntervalMs() * 2L + 200);
            } else {
                throw new Main.UsageError("unknown step " + st);
            }
        }
        ((DefaultMessageStore) bc.getMessageStore()).dispatchBehindBytes();
        Store.waitReput((DefaultMessageStore) bc.getMessageStore(), 60_000);
        JsonObject end = scen.has("end") ? scen.getAsJsonObject("end") : new JsonObject();
        String mode = end.has("mode") ? end.get("mode").getAsString() : "clean";
        JsonObject res = new JsonObject();
        res.addProperty("version", version);
        res.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        res.add("messages", msgs);
        res.add("deliveries", deliveries);
        res.add("timer_state_before_end", timerState(bc));
        if (mode.equals("clean")) {
            shutdown(bc);
            res.addProperty("clean_shutdown", true);
        } else if (mode.equals("kill")) {
            res.addProperty("clean_shutdown", false);
            res.addProperty("kill", true);
        } else {
            throw new Main.UsageError("end.mode must be clean or kill");
        }
        res.add("files_as_left", Viewer.sizes(root, false));
        return res;
    }

    static JsonObject putOne(BrokerController bc, JsonObject m, int seq) throws Exception {
        Inner in = build(m, seq);
        JsonObject r = new JsonObject();
        r.addProperty("seq", seq);
        r.addProperty("requested_topic", in.getTopic());
        r.addProperty("requested_queue_id", in.getQueueId());
        r.addProperty("delay_level", (int) Put.lng(m, "delay_level", 0));
        r.addProperty("born_timestamp", in.getBornTimestamp());
        PutMessageResult pr = bc.getMessageStore().putMessage(in);
        // the hook rewrote the message in place: what the record carries
        Map<String, String> stored = MessageDecoder.string2messageProperties(
            in.getPropertiesString() == null ? "" : in.getPropertiesString());
        r.addProperty("topic", in.getTopic());
        r.addProperty("queue_id", in.getQueueId());
        r.addProperty("uniq_key", stored.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        r.addProperty("timer_out_ms", stored.get("TIMER_OUT_MS"));
        r.addProperty("properties_string", in.getPropertiesString());
        Put.fill(r, pr);
        r.addProperty("acknowledged", Put.ok(pr));
        return r;
    }

    static boolean quiet(BrokerController bc) throws Exception {
        TimerMessageStore t = bc.getTimerMessageStore();
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        return s.dispatchBehindBytes() <= 0 && (t == null || enqueueBehind(t, s) <= 0
            && t.getCommitQueueOffset() >= t.getQueueOffset());
    }

    /** TimerMessageStore.getEnqueueBehindMessages (5.1.0+): the timer queue's entries not yet
     *  enqueued; 5.0.0 lacks the method, so the same from the queue's max offset. */
    static long enqueueBehind(TimerMessageStore t, DefaultMessageStore s) throws Exception {
        return s.getMaxOffsetInQueue(TIMER_TOPIC, 0) - t.getQueueOffset();
    }

    /** A getter some releases lack (5.0.0): the method, else the field of that name, else null. */
    static Object member(Object o, String method, String field) {
        try {
            return o.getClass().getMethod(method).invoke(o);
        } catch (ReflectiveOperationException e) {
            for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
                try {
                    java.lang.reflect.Field f = c.getDeclaredField(field);
                    f.setAccessible(true);
                    return f.get(o);
                } catch (ReflectiveOperationException ignored) {
                    // try the superclass
                }
            }
            return null;
        }
    }

    /** Until the reput caught up and the timer enqueued everything its queue holds. */
    static void waitEnqueued(BrokerController bc, long timeoutMs) throws Exception {
        long end = System.currentTimeMillis() + timeoutMs;
        int stable = 0;
        while (System.currentTimeMillis() < end && stable < 3) {
            stable = quiet(bc) ? stable + 1 : 0;
            Thread.sleep(100);
        }
        if (stable < 3) {
            throw new IllegalStateException("the timer did not enqueue everything within " + timeoutMs + " ms");
        }
    }

    /**
     * Runs the timer's dequeue and the schedule service until everything due at cutoff has been
     * delivered: the dequeue's read time passed the cutoff's slot, the enqueue (roll copies, late
     * entries) caught up, and every delay level's offset passed its last entry due at the cutoff.
     * Returns what the commitlog gained meanwhile. Then both are held again.
     */
    static JsonObject deliver(BrokerController bc, long cutoff, long before) throws Exception {
        MessageStoreConfig c = msc(bc);
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        TimerMessageStore t = bc.getTimerMessageStore();
        Object sms = bc.getScheduleMessageService();
        Store.call(sms, "start");
        holdDequeue(c, false);
        long end = System.currentTimeMillis() + 120_000;
        int prec = c.getTimerPrecisionMs();
        int stable = 0;
        while (stable < 3) {
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("the timer did not deliver up to " + cutoff + " within 120 s (read time "
                    + (t == null ? -1 : t.getCurrReadTimeMs()) + ")");
            }
            boolean done = t == null || t.getCurrReadTimeMs() > cutoff / prec * prec;
            done = done && quiet(bc) && scheduleDone(bc, sms, cutoff);
            stable = done ? stable + 1 : 0;
            Thread.sleep(200);
        }
        holdDequeue(c, true);
        Store.call(sms, "stop");   // persists config/delayOffset.json
        Store.waitReput(s, 60_000);
        JsonObject r = new JsonObject();
        r.addProperty("cutoff_ms", cutoff);
        r.addProperty("commitlog_max_offset_before", before);
        r.addProperty("commitlog_max_offset_after", s.getMaxPhyOffset());
        JsonArray recs = new JsonArray();
        Viewer.walk(s, c, before, s.getMaxPhyOffset(), recs, new long[] {-1});
        r.add("records", recs);
        return r;
    }

    @SuppressWarnings("unchecked")
    static boolean scheduleDone(BrokerController bc, Object sms, long cutoff) throws Exception {
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        ConcurrentMap<Integer, Long> offsets = (ConcurrentMap<Integer, Long>) Store.call(sms, "getOffsetTable");
        for (int q = 0; q < 64; q++) {
            long max = s.getMaxOffsetInQueue(SCHEDULE_TOPIC, q);
            if (max <= 0) {
                continue;
            }
            long min = s.getMinOffsetInQueue(SCHEDULE_TOPIC, q);
            Long at = offsets.get(q + 1);
            long from = at == null ? 0 : at;
            // the service delivers in queue order and stops at the first entry not yet due
            for (long o = Math.max(from, min); o < max; o++) {
                long deliverAt = scheduleTagsCode(s, q, o);
                if (deliverAt > cutoff) {
                    break;
                }
                return false;   // an entry due at the cutoff is still ahead of the service's offset
            }
        }
        return true;
    }

    static long scheduleTagsCode(DefaultMessageStore s, int q, long offset) throws Exception {
        Object cq = s.getConsumeQueue(SCHEDULE_TOPIC, q);
        Object unit = Store.call(cq, "get", offset);
        if (unit == null) {
            return Long.MAX_VALUE;
        }
        return (Long) Store.call(unit, "getTagsCode");
    }

    // ---------------------------------------------------------------- view

    static JsonObject view(String version, JsonObject cfg, Path original, String mode) throws Exception {
        Path tmp = Files.createTempDirectory("timer-oracle-view-");
        Path root = tmp.resolve("store");
        try {
            Viewer.copyTree(original, root);
            return viewIn(version, cfg, root, mode);
        } finally {
            Main.deleteTree(tmp);
        }
    }

    static JsonObject viewIn(String version, JsonObject cfg, Path root, String mode) throws Exception {
        JsonObject v = new JsonObject();
        v.addProperty("rocketmq_version", version);
        v.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        v.add("timer_checkpoint_before", rawTimerCheckpoint(root.resolve("config").resolve("timercheck")));
        v.add("files_before", Viewer.sizes(root, false));
        long startMs = System.currentTimeMillis();
        v.addProperty("start_ms", startMs);
        BrokerController bc = open(cfg, root);
        MessageStoreConfig c = msc(bc);
        v.add("after_load", timerState(bc));
        v.add("pending_after_load", pendingWalk(bc));
        v.add("schedule_after_load", scheduleState(bc));
        if (mode.equals("start-stop")) {
            // the broker's next start, stopped before its timer moved: no enqueue, no dequeue, one flush
            holdDequeue(c, true);
            c.setTimerStopEnqueue(true);
            startStore(bc);
            Store.waitReput((DefaultMessageStore) bc.getMessageStore(), 60_000);
            // the TimerFlushService flushes once as it starts (wheel, timer log, checkpoint), then
            // every timerFlushIntervalMs; the shutdown writes the checkpoint again (not the wheel)
            Thread.sleep(Math.min(c.getTimerFlushIntervalMs() * 2L + 300, 2500));
            v.add("after_start", timerState(bc));
            shutdown(bc);
            v.add("timer_files_after_shutdown", timerFiles(root));
            v.add("timer_checkpoint_after_shutdown", rawTimerCheckpoint(root.resolve("config").resolve("timercheck")));
            return v;
        }
        // what the commitlog gains from here on is the broker's doing: the enqueue delivers
        // at once what is already due, the dequeue and the schedule service the rest
        long mark = bc.getMessageStore().getMaxPhyOffset();
        holdDequeue(c, true);
        startStore(bc);
        waitEnqueued(bc, 120_000);
        JsonObject d = deliver(bc, startMs, mark);
        v.add("run", d);
        // hold everything, then what is still waiting
        c.setTimerStopEnqueue(true);
        Thread.sleep(300);
        v.add("after_run", timerState(bc));
        v.add("pending_after_run", pendingWalk(bc));
        v.add("enqueue_behind_after_run", enqueueBehind(bc));
        v.add("schedule_after_run", scheduleState(bc));
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        JsonArray all = new JsonArray();
        Viewer.walk(s, c, s.getMinPhyOffset(), d.get("commitlog_max_offset_before").getAsLong(), all, new long[] {-1});
        v.add("records_before_run", all);
        shutdown(bc);
        return v;
    }

    static JsonObject rawTimerCheckpoint(Path p) throws Exception {
        JsonObject o = new JsonObject();
        o.addProperty("present", Files.exists(p));
        if (!Files.exists(p)) {
            return o;
        }
        long size = Files.size(p);
        o.addProperty("file_size", size);
        String[] names = {"lastReadTimeMs", "lastTimerLogFlushPos", "lastTimerQueueOffset", "masterTimerQueueOffset",
            "stateVersion", "timestamp", "counter"};
        try (RandomAccessFile f = new RandomAccessFile(p.toFile(), "r")) {
            for (int i = 0; i < names.length && (i + 1) * 8L <= size; i++) {
                o.addProperty(names[i], f.readLong());
            }
        }
        return o;
    }

    static JsonObject timerFiles(Path root) throws Exception {
        JsonObject o = new JsonObject();
        for (String rel : Viewer.listFiles(root)) {
            if (rel.equals("timerwheel") || rel.startsWith("timerwheel.") || rel.startsWith("timerlog/")
                || rel.equals("config/timercheck") || rel.equals("config/timermetrics")) {
                Path p = root.resolve(rel);
                JsonObject f = new JsonObject();
                f.addProperty("size", Files.size(p));
                f.addProperty("sha256", Viewer.sha256(p, Long.MAX_VALUE));
                o.add(rel, f);
            }
        }
        return o;
    }

    static JsonObject timerState(BrokerController bc) throws Exception {
        JsonObject o = new JsonObject();
        TimerMessageStore t = bc.getTimerMessageStore();
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        o.addProperty("commitlog_min_offset", s.getMinPhyOffset());
        o.addProperty("commitlog_max_offset", s.getMaxPhyOffset());
        if (t == null) {
            return o;
        }
        TimerCheckpoint cp = (TimerCheckpoint) member(t, "getTimerCheckpoint", "timerCheckpoint");
        o.addProperty("curr_read_time_ms", t.getCurrReadTimeMs());
        o.addProperty("commit_read_time_ms", t.getCommitReadTimeMs());
        o.addProperty("curr_queue_offset", t.getQueueOffset());
        o.addProperty("commit_queue_offset", t.getCommitQueueOffset());
        o.addProperty("precision_ms", t.getPrecisionMs());
        o.addProperty("timer_log_min_offset", t.getTimerLog().getMappedFileQueue().getMinOffset());
        o.addProperty("timer_log_max_offset", t.getTimerLog().getMappedFileQueue().getMaxOffset());
        o.addProperty("timer_log_flushed_where", t.getTimerLog().getMappedFileQueue().getFlushedWhere());
        o.addProperty("dequeue_behind_messages", (Number) member(t, "getDequeueBehindMessages", "-"));
        o.addProperty("enqueue_behind_messages", enqueueBehind(t, s));
        // the broker's own count of what waits in the wheel from its read time (TimerWheel.getAllNum)
        o.addProperty("all_congest_num", (Number) member(t, "getAllCongestNum", "-"));
        o.addProperty("timer_queue_max_offset", s.getMaxOffsetInQueue(TIMER_TOPIC, 0));
        o.addProperty("timer_queue_min_offset", s.getMinOffsetInQueue(TIMER_TOPIC, 0));
        JsonObject ck = new JsonObject();
        ck.addProperty("lastReadTimeMs", cp.getLastReadTimeMs());
        ck.addProperty("lastTimerLogFlushPos", cp.getLastTimerLogFlushPos());
        ck.addProperty("lastTimerQueueOffset", cp.getLastTimerQueueOffset());
        ck.addProperty("masterTimerQueueOffset", cp.getMasterTimerQueueOffset());
        o.add("checkpoint_in_memory", ck);
        return o;
    }

    /**
     * What the wheel holds from the read time on, as the dequeue reads it: every slot whose stored
     * time is its own (TimerWheel.getSlot), its chain from lastPos through prevPos in the timer log,
     * each entry's message looked up at its commitlog offset and size.
     */
    static JsonArray pendingWalk(BrokerController bc) {
        JsonArray arr = new JsonArray();
        TimerMessageStore t = bc.getTimerMessageStore();
        if (t == null) {
            return arr;
        }
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        TimerWheel w = t.getTimerWheel();
        TimerLog log = t.getTimerLog();
        int fileSize = msc(bc).getMappedFileSizeTimerLog();
        long read = t.getCurrReadTimeMs();
        int prec = t.getPrecisionMs();
        for (long i = 0; i < 2L * w.slotsTotal; i++) {
            long time = read + i * prec;
            Slot slot = w.getSlot(time);
            if (slot.timeMs == -1) {
                continue;
            }
            long pos = slot.lastPos;
            int guard = 0;
            while (pos != -1 && guard++ < 1_000_000) {
                SelectMappedBufferResult sbr = log.getWholeBuffer(pos);
                if (sbr == null) {
                    break;
                }
                long prev;
                try {
                    ByteBuffer bb = sbr.getByteBuffer();
                    bb.position((int) (pos % fileSize));
                    bb.getInt();
                    prev = bb.getLong();
                    int magic = bb.getInt();
                    long enq = bb.getLong();
                    long delayed = bb.getInt() + enq;
                    long offPy = bb.getLong();
                    int sizePy = bb.getInt();
                    JsonObject e = new JsonObject();
                    e.addProperty("slot_time_ms", slot.timeMs);
                    e.addProperty("pos", pos);
                    e.addProperty("magic", magic);
                    e.addProperty("delayed_time_ms", delayed);
                    e.addProperty("offset_py", offPy);
                    e.addProperty("size_py", sizePy);
                    MessageExt m = s.lookMessageByOffset(offPy, sizePy);
                    if (m == null) {
                        e.addProperty("miss", true);
                    } else {
                        e.addProperty("topic", m.getTopic());
                        e.addProperty("uniq_key", m.getProperty("UNIQ_KEY"));
                        e.addProperty("real_topic", m.getProperty("REAL_TOPIC"));
                        e.addProperty("timer_out_ms", m.getProperty("TIMER_OUT_MS"));
                        e.addProperty("roll_times", m.getProperty("TIMER_ROLL_TIMES"));
                        e.addProperty("del_uniq_key", m.getProperty("TIMER_DEL_UNIQKEY"));
                    }
                    arr.add(e);
                } catch (RuntimeException ex) {
                    JsonObject e = new JsonObject();
                    e.addProperty("slot_time_ms", slot.timeMs);
                    e.addProperty("pos", pos);
                    e.addProperty("unreadable", ex.getClass().getSimpleName());
                    arr.add(e);
                    break;
                } finally {
                    sbr.release();
                }
                pos = prev;
            }
        }
        return arr;
    }

    static JsonArray enqueueBehind(BrokerController bc) throws Exception {
        JsonArray arr = new JsonArray();
        TimerMessageStore t = bc.getTimerMessageStore();
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        if (t == null) {
            return arr;
        }
        long max = s.getMaxOffsetInQueue(TIMER_TOPIC, 0);
        Object cq = s.getConsumeQueue(TIMER_TOPIC, 0);
        for (long o = t.getQueueOffset(); cq != null && o < max; o++) {
            Object unit = Store.call(cq, "get", o);
            if (unit == null) {
                continue;
            }
            long pos = (Long) Store.call(unit, "getPos");
            int size = (Integer) Store.call(unit, "getSize");
            MessageExt m = s.lookMessageByOffset(pos, size);
            JsonObject e = new JsonObject();
            e.addProperty("queue_offset", o);
            e.addProperty("offset_py", pos);
            if (m != null) {
                e.addProperty("uniq_key", m.getProperty("UNIQ_KEY"));
                e.addProperty("timer_out_ms", m.getProperty("TIMER_OUT_MS"));
            }
            arr.add(e);
        }
        return arr;
    }

    @SuppressWarnings("unchecked")
    static JsonObject scheduleState(BrokerController bc) throws Exception {
        JsonObject o = new JsonObject();
        Object sms = bc.getScheduleMessageService();
        ConcurrentMap<Integer, Long> offsets = (ConcurrentMap<Integer, Long>) Store.call(sms, "getOffsetTable");
        JsonObject off = new JsonObject();
        for (Map.Entry<Integer, Long> e : offsets.entrySet()) {
            off.addProperty(String.valueOf(e.getKey()), e.getValue());
        }
        o.add("offset_table", off);
        DefaultMessageStore s = (DefaultMessageStore) bc.getMessageStore();
        JsonObject queues = new JsonObject();
        for (int q = 0; q < 64; q++) {
            long max = s.getMaxOffsetInQueue(SCHEDULE_TOPIC, q);
            if (max <= 0) {
                continue;
            }
            long min = s.getMinOffsetInQueue(SCHEDULE_TOPIC, q);
            JsonObject qo = new JsonObject();
            qo.addProperty("min_offset", min);
            qo.addProperty("max_offset", max);
            JsonArray es = new JsonArray();
            Object cq = s.getConsumeQueue(SCHEDULE_TOPIC, q);
            for (long i = min; i < max; i++) {
                Object unit = Store.call(cq, "get", i);
                if (unit == null) {
                    continue;
                }
                long pos = (Long) Store.call(unit, "getPos");
                int size = (Integer) Store.call(unit, "getSize");
                MessageExt m = s.lookMessageByOffset(pos, size);
                JsonObject e = new JsonObject();
                e.addProperty("queue_offset", i);
                e.addProperty("deliver_ms", (Long) Store.call(unit, "getTagsCode"));
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
