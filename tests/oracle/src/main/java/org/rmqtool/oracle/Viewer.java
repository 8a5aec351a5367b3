package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.StoreCheckpoint;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.Inet6Address;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import java.util.zip.CRC32;

/** The broker's view of a store after its own recovery (the `view` verb). */
final class Viewer {

    static JsonObject view(String version, JsonObject cfg, Path store, boolean copy, JsonArray extraKeys,
        long timeoutMs) throws Exception {
        if (!Files.isDirectory(store)) {
            throw new Main.UsageError("store " + store + " is not a directory");
        }
        final Path root = copy ? Files.createTempDirectory("rmq-oracle-view-") : store;
        if (copy) {
            copyTree(store, root);
        }
        try {
            return Timeout.run(() -> viewIn(version, cfg, store, root, extraKeys), timeoutMs,
                "view of " + store);
        } finally {
            if (copy) {
                Main.deleteTree(root);
            }
        }
    }

    static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> s = Files.walk(from)) {
            for (Path p : (Iterable<Path>) s::iterator) {
                Path t = to.resolve(from.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(t);
                } else {
                    copySparse(p, t);
                }
            }
        }
    }

    /**
     * A copy that keeps the source's holes (DLedger's 160 MiB index files are sparse: a dense copy
     * per view would write them out): blocks of zeros are skipped, the length set at the end.
     */
    static void copySparse(Path from, Path to) throws IOException {
        byte[] buf = new byte[1 << 16];
        try (java.io.InputStream in = Files.newInputStream(from);
             RandomAccessFile out = new RandomAccessFile(to.toFile(), "rw")) {
            out.setLength(0);
            long pos = 0;
            for (int n; (n = in.readNBytes(buf, 0, buf.length)) > 0; pos += n) {
                boolean zero = true;
                for (int i = 0; i < n && zero; i++) {
                    zero = buf[i] == 0;
                }
                if (!zero) {
                    out.seek(pos);
                    out.write(buf, 0, n);
                }
            }
            out.setLength(pos);
        }
    }

    static JsonObject viewIn(String version, JsonObject cfg, Path original, Path root, JsonArray extraKeys)
        throws Exception {
        JsonObject v = new JsonObject();
        v.addProperty("rocketmq_version", version);
        v.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        v.addProperty("store", original.toString());
        JsonObject vc = new JsonObject();
        for (Map.Entry<String, JsonElement> e : cfg.entrySet()) {
            vc.add(e.getKey(), e.getValue());
        }
        v.add("verifier_store_config", vc);

        boolean abort = Files.exists(root.resolve("abort"));
        JsonObject before = new JsonObject();
        before.addProperty("abort_file_present", abort);
        before.add("checkpoint_raw", rawCheckpoint(root.resolve("checkpoint")));
        before.add("files", sizes(root, false));
        MessageStoreConfig c = Store.config(cfg, root);
        boolean dledger = DLedger.on(c);
        if (dledger) {
            before.add("dledger_files", DLedger.smallFiles(root));
        }
        v.add("before_recovery", before);
        v.addProperty("recovery_mode", abort ? "abnormal" : "normal");
        v.addProperty("recovery_mode_detail", abort ? "abnormal (abort file present -> CommitLog.recoverAbnormally)"
            : "normal (CommitLog.recoverNormally)");

        if (dledger) {
            DLedger.guardExit();
        }
        DefaultMessageStore s = Store.open(c, cfg);
        long t0 = System.nanoTime();
        boolean ok = s.load();
        double loadMs = (System.nanoTime() - t0) / 1e6;
        v.addProperty("load_ok", ok);
        if (dledger && DLedger.ExitGuard.requested != null) {
            v.addProperty("broker_exit_requested", DLedger.ExitGuard.requested);
        }
        JsonObject timing = new JsonObject();
        timing.addProperty("load_and_recover_ms", loadMs);
        JsonObject nonCanon = new JsonObject();
        if (!ok) {
            // RocketMQ refused the store (load() returned false): nothing to start or shut down.
            v.add("timing", timing);
            v.add("non_canonical", nonCanon);
            v.add("files_after_failed_load", sizes(root, false));
            try {
                QuickShutdown.run(s::shutdown);
            } catch (Throwable ignored) {
                // load() left half-built services; the broker would exit here
            }
            return v;
        }
        StoreCheckpoint cp = s.getStoreCheckpoint();
        JsonObject cpm = new JsonObject();
        cpm.addProperty("physicMsgTimestamp", cp.getPhysicMsgTimestamp());
        cpm.addProperty("logicsMsgTimestamp", cp.getLogicsMsgTimestamp());
        cpm.addProperty("indexMsgTimestamp", cp.getIndexMsgTimestamp());
        nonCanon.add("checkpoint_in_memory_right_after_load", cpm);
        JsonObject alb = new JsonObject();
        alb.addProperty("commitlog_max_offset", s.getMaxPhyOffset());
        alb.addProperty("commitlog_min_offset", s.getMinPhyOffset());
        if (dledger) {
            alb.add("dledger", DLedger.state(s));
        }
        v.add("after_load_before_start", alb);

        Object schedule = holdSchedule(s);
        long t1 = System.nanoTime();
        s.start();
        if (dledger) {
            // the member elects itself (a new term), then commits what it holds: only then does the
            // DLedger commitlog hand its entries to the reput (getMaxOffset is the committed position)
            DLedger.awaitLeader(s, 60_000);
            v.addProperty("dledger_committed_all", DLedger.awaitCommitted(s, 60_000));
        }
        boolean caught = Store.waitReput(s, 60_000);
        persistSchedule(schedule);
        timing.addProperty("start_and_reput_catchup_ms", (System.nanoTime() - t1) / 1e6);
        v.addProperty("dispatch_behind_bytes_after_start", s.dispatchBehindBytes());
        v.addProperty("reput_caught_up", caught);

        long min = s.getMinPhyOffset();
        long max = s.getMaxPhyOffset();
        v.addProperty("commitlog_min_offset", min);
        v.addProperty("commitlog_max_offset", max);
        JsonArray recs = new JsonArray();
        long[] oom = {-1};
        int[] counts = walk(s, c, min, max, recs, oom);
        if (oom[0] >= 0) {
            // (this walk, not the broker's recovery, met a TOTALSIZE no JVM array holds: quirk Q10)
            v.addProperty("commitlog_walk_out_of_memory_at", oom[0]);
        }
        v.addProperty("commitlog_record_count", counts[0]);
        v.addProperty("commitlog_blank_records", counts[1]);
        v.add("commitlog_records", recs);
        if (dledger) {
            v.add("dledger", DLedger.state(s));
            v.add("dledger_entries", DLedger.entries(s));
        }
        v.add("commitlog_topic_queue_table", topicQueueTable(s));
        v.add("consume_queues", consumeQueues(s));
        if (Store.major() >= 5) {
            v.add("batch_consume_queues", BatchView.view(s));
            JsonObject rocks = RocksView.view(s, max);
            if (rocks != null) {
                v.add("rocksdb_consume_queue", rocks);
            }
        }
        v.add("query_message_by_key", queries(s, recs, extraKeys));
        v.addProperty("query_keys_include_scenario_json_keys", extraKeys != null);
        JsonArray byTag = tagQueries(s, recs);
        if (byTag != null) {
            v.add("query_message_by_tag", byTag);
        }
        JsonObject afterRec = sizes(root, false);
        JsonObject exceptIndex = new JsonObject();
        for (Map.Entry<String, JsonElement> e : afterRec.entrySet()) {
            if (!e.getKey().startsWith("index/") && !e.getKey().equals("lock")) {
                exceptIndex.add(e.getKey(), e.getValue());
            }
        }
        v.add("files_after_recovery_except_index", exceptIndex);
        v.addProperty("index_file_count_after_recovery",
            afterRec.keySet().stream().filter(k -> k.startsWith("index/")).count());

        timing.addProperty("collect_ms", (System.nanoTime() - t1) / 1e6 - timing.get("start_and_reput_catchup_ms").getAsDouble());
        long t2 = System.nanoTime();
        QuickShutdown.run(s::shutdown);
        timing.addProperty("shutdown_ms", (System.nanoTime() - t2) / 1e6);
        v.addProperty("abort_file_present_after_shutdown", Files.exists(root.resolve("abort")));
        if (dledger) {
            v.add("dledger_files_after_shutdown", DLedger.smallFiles(root));
        }
        JsonObject files = new JsonObject();
        JsonArray idx = new JsonArray();
        JsonArray idxNames = new JsonArray();
        JsonObject rocks = new JsonObject();
        for (String rel : listFiles(root)) {
            if (rel.equals("lock")) {
                continue;
            }
            if (rel.startsWith("rocksdbstore/")) {
                // 5.5: RocksDB's own files (log numbers, OPTIONS with timestamps) are not a function of the input
                rocks.addProperty(rel, Files.size(root.resolve(rel)));
                continue;
            }
            JsonObject h = new JsonObject();
            // (streamed; a damaged store may hold a sparse file of 64 GiB, of which only the
            // first HASHED bytes are hashed: more than the broker maps of any store file)
            long size = Files.size(root.resolve(rel));
            h.addProperty("sha256", sha256(root.resolve(rel), HASHED));
            h.addProperty("size", size);
            if (size > HASHED) {
                h.addProperty("hashed_bytes", HASHED);
            }
            if (rel.startsWith("index/")) {
                idx.add(h);
                idxNames.add(rel);
            } else {
                files.add(rel, h);
            }
        }
        v.add("files_after_rocketmq_shutdown", files);
        v.add("index_files_after_rocketmq_shutdown_in_name_order", idx);
        nonCanon.add("index_file_names_after_rocketmq_shutdown", idxNames);
        nonCanon.add("checkpoint_raw_after_rocketmq_shutdown", rawCheckpoint(root.resolve("checkpoint")));
        if (rocks.size() > 0) {
            nonCanon.add("rocksdb_files_after_rocketmq_shutdown", rocks);
        }
        nonCanon.addProperty("note", "timing and non_canonical differ between runs; everything else is a "
            + "deterministic function of the input store");
        v.add("timing", timing);
        v.add("non_canonical", nonCanon);
        return v;
    }

    /**
     * 4.x: DefaultMessageStore.start() starts the ScheduleMessageService of a master, which would deliver
     * due delay-level messages about a second later (non-deterministic, and every old store's delays are
     * due). The harness marks the service started so that start() leaves it alone, and after shutdown
     * persists its offset table once right after start(), which is what the service writes when it is
     * stopped before it delivered anything (ScheduleMessageService.shutdown: config/delayOffset.json,
     * with the previous content as .bak); the recorded views of fixtures/real show exactly one such
     * persist. Store shutdown then leaves the file alone (the service counts as stopped).
     */
    static Object holdSchedule(DefaultMessageStore s) {
        try {
            Method g = Store.method(s.getClass(), "getScheduleMessageService", 0);
            if (g == null) {
                return null;
            }
            Object sms = g.invoke(s);
            if (sms == null) {
                return null;
            }
            Field f = sms.getClass().getDeclaredField("started");
            f.setAccessible(true);
            ((AtomicBoolean) f.get(sms)).set(true);
            STARTED.put(sms, f);
            return sms;
        } catch (Exception e) {
            throw new RuntimeException("cannot hold the ScheduleMessageService: " + e, e);
        }
    }

    static final Map<Object, Field> STARTED = new java.util.concurrent.ConcurrentHashMap<>();

    static void persistSchedule(Object sms) throws Exception {
        if (sms != null) {
            Store.call(sms, "persist");
            // stopped: DefaultMessageStore.shutdown() must not persist a second time
            ((AtomicBoolean) STARTED.remove(sms).get(sms)).set(false);
        }
    }

    static JsonObject rawCheckpoint(Path p) throws IOException {
        JsonObject o = new JsonObject();
        o.addProperty("present", Files.exists(p));
        if (Files.exists(p)) {
            long size = Files.size(p);
            o.addProperty("file_size", size);
            if (size >= 24) {
                byte[] b = new byte[24];
                try (RandomAccessFile f = new RandomAccessFile(p.toFile(), "r")) {
                    f.readFully(b);
                }
                ByteBuffer bb = ByteBuffer.wrap(b);
                o.addProperty("physicMsgTimestamp", bb.getLong(0));
                o.addProperty("logicsMsgTimestamp", bb.getLong(8));
                o.addProperty("indexMsgTimestamp", bb.getLong(16));
            }
        }
        return o;
    }

    static List<String> listFiles(Path root) throws IOException {
        try (Stream<Path> s = Files.walk(root)) {
            return s.filter(Files::isRegularFile).map(p -> root.relativize(p).toString().replace('\\', '/'))
                .sorted().collect(Collectors.toList());
        }
    }

    static JsonObject sizes(Path root, boolean withLock) throws IOException {
        JsonObject o = new JsonObject();
        for (String rel : listFiles(root)) {
            if (!withLock && rel.equals("lock")) {
                continue;
            }
            o.addProperty(rel, Files.size(root.resolve(rel)));
        }
        return o;
    }

    /** Bytes of a file the view hashes: the default mapped size of a commitlog file (the largest store file the broker maps). */
    static final long HASHED = 1L << 30;

    /** SHA-256 of the first limit bytes of p (all of them when it is no larger), read in chunks. */
    static String sha256(Path p, long limit) throws IOException {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[1 << 20];
            long left = limit;
            try (java.io.InputStream in = Files.newInputStream(p)) {
                for (int n; left > 0 && (n = in.read(buf, 0, (int) Math.min(buf.length, left))) > 0; ) {
                    md.update(buf, 0, n);
                    left -= n;
                }
            }
            return hex(md.digest());
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new RuntimeException(e);
        }
    }

    static String hex(byte[] d) {
        StringBuilder sb = new StringBuilder();
        for (byte x : d) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    static String sha256(byte[] b) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            return hex(md.digest(b == null ? new byte[0] : b));
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    /** The store's own record parser (CommitLog.checkMessageAndReturnSize) over [min, max). */
    static DispatchRequest check(CommitLog cl, ByteBuffer bb, boolean dup) throws Exception {
        Method m4 = null;
        Method m3 = null;
        for (Method m : cl.getClass().getMethods()) {
            if (!m.getName().equals("checkMessageAndReturnSize")) {
                continue;
            }
            Class<?>[] p = m.getParameterTypes();
            if (p.length == 4 && p[0] == ByteBuffer.class) {
                m4 = m;
            } else if (p.length == 3 && p[0] == ByteBuffer.class && p[2] == boolean.class) {
                m3 = m;
            }
        }
        if (m4 != null) {
            // 5.x: (buffer, checkCRC, checkDupInfo, readBody)
            return (DispatchRequest) m4.invoke(cl, bb, true, dup, true);
        }
        // 4.x: (buffer, checkCRC, readBody)
        return (DispatchRequest) m3.invoke(cl, bb, true, true);
    }

    static int[] walk(DefaultMessageStore s, MessageStoreConfig c, long min, long max, JsonArray out, long[] oom)
            throws Exception {
        CommitLog cl = s.getCommitLog();
        boolean dup = c.isDuplicationEnable();
        int n = 0;
        int blanks = 0;
        long off = min;
        outer:
        while (off < max) {
            SelectMappedBufferResult r = cl.getData(off, off == min);
            if (r == null) {
                break;
            }
            long base = r.getStartOffset();
            try {
                ByteBuffer bb = r.getByteBuffer();
                int pos = (int) (off - base);
                while (pos < r.getSize()) {
                    ByteBuffer probe = bb.duplicate();
                    probe.position(pos);
                    DispatchRequest d;
                    try {
                        d = check(cl, probe, dup);
                    } catch (java.lang.reflect.InvocationTargetException e) {
                        if (!(e.getCause() instanceof OutOfMemoryError)) {
                            throw e;
                        }
                        oom[0] = base + pos;
                        break outer;
                    }
                    if (!d.isSuccess()) {
                        break outer;
                    }
                    if (d.getMsgSize() == 0) {
                        JsonObject b = new JsonObject();
                        b.addProperty("blank_end_of_file_record", true);
                        b.addProperty("blank_total_size_field", bb.getInt(pos));
                        b.addProperty("phys_offset", base + pos);
                        if (pos + 8 <= bb.limit() && bb.getInt(pos) == -1 && bb.getInt(pos + 4) != -875286124) {
                            // DLedger's end-of-file padding: magic -1, then the length of the rest of the file
                            b.addProperty("dledger_blank_length", bb.getInt(pos + 4));
                        }
                        out.add(b);
                        blanks++;
                        off = cl.rollNextFile(base + pos);
                        continue outer;
                    }
                    // a DLedger entry: its header (DLedgerEntry.BODY_OFFSET bytes) before the message
                    int head = d.getBufferSize() > d.getMsgSize() ? d.getBufferSize() - d.getMsgSize() : 0;
                    ByteBuffer one = bb.duplicate();
                    one.position(pos + head);
                    one.limit(pos + head + d.getMsgSize());
                    JsonObject rec = record(one.slice(), base + pos + head, d);
                    if (head > 0) {
                        rec.add("dledger_entry", DLedger.header(bb, pos, base + pos));
                    }
                    out.add(rec);
                    n++;
                    pos += head + d.getMsgSize();
                }
                off = base + pos;
                if (pos < r.getSize()) {
                    break;
                }
            } finally {
                r.release();
            }
        }
        return new int[] {n, blanks};
    }

    static String host(SocketAddress a) {
        if (!(a instanceof InetSocketAddress)) {
            return String.valueOf(a);
        }
        InetSocketAddress i = (InetSocketAddress) a;
        String h = i.getAddress().getHostAddress();
        return (i.getAddress() instanceof Inet6Address ? "[" + h + "]" : h) + ":" + i.getPort();
    }

    static String tranType(int sysFlag) {
        switch (sysFlag & 0xC) {
            case 0x4: return "PREPARED_TYPE";
            case 0x8: return "COMMIT_TYPE";
            case 0xC: return "ROLLBACK_TYPE";
            default: return "NOT_TYPE";
        }
    }

    static JsonObject record(ByteBuffer one, long phys, DispatchRequest d) {
        MessageExt m = MessageDecoder.decode(one.duplicate(), true, false);
        JsonObject o = new JsonObject();
        if (m == null) {
            // the store's parser accepted a record MessageDecoder cannot decode: a DLedger
            // entry's message whose fields the check does not read, or a store port above
            // 65535, which InetSocketAddress refuses: what the dispatch read, and that no
            // client decodes it
            o.addProperty("decode_failed", true);
            o.addProperty("decodable", false);
            o.addProperty("body_crc_ok", false);
            o.addProperty("phys_offset", phys);
            o.addProperty("size", d.getMsgSize());
            o.addProperty("topic", d.getTopic());
            o.addProperty("queue_id", d.getQueueId());
            o.addProperty("queue_offset", d.getConsumeQueueOffset());
            o.add("keys", JsonNull.INSTANCE);
            o.add("uniq_key", JsonNull.INSTANCE);
            o.add("tags", JsonNull.INSTANCE);
            return o;
        }
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
        CRC32 crc = new CRC32();
        crc.update(body);
        int crcv = (int) (crc.getValue() & 0x7FFFFFFF);
        o.addProperty("body_crc_ok", crcv == m.getBodyCRC());
        o.addProperty("body_crc_stored", m.getBodyCRC());
        o.addProperty("body_len", body.length);
        o.addProperty("body_sha256", sha256(body));
        o.addProperty("born_host", host(m.getBornHost()));
        o.addProperty("born_timestamp", m.getBornTimestamp());
        o.addProperty("flag", m.getFlag());
        o.addProperty("keys", m.getKeys());
        o.addProperty("msg_id", m.getMsgId());
        o.addProperty("phys_offset", phys);
        o.addProperty("prepared_transaction_offset", m.getPreparedTransactionOffset());
        JsonObject props = new JsonObject();
        Map<String, String> pm = m.getProperties() == null ? Collections.emptyMap() : new TreeMap<>(m.getProperties());
        for (Map.Entry<String, String> e : pm.entrySet()) {
            props.addProperty(e.getKey(), e.getValue());
        }
        o.add("properties", props);
        o.addProperty("queue_id", m.getQueueId());
        o.addProperty("queue_offset", m.getQueueOffset());
        o.addProperty("reconsume_times", m.getReconsumeTimes());
        o.addProperty("size", d.getMsgSize());
        o.addProperty("store_host", host(m.getStoreHost()));
        o.addProperty("store_timestamp", m.getStoreTimestamp());
        o.addProperty("sys_flag", m.getSysFlag());
        o.addProperty("tags", m.getTags());
        o.addProperty("tags_code_computed_by_dispatch", d.getTagsCode());
        o.addProperty("topic", m.getTopic());
        o.addProperty("transaction_type", tranType(m.getSysFlag()));
        o.addProperty("uniq_key", m.getProperty("UNIQ_KEY"));
        return o;
    }

    @SuppressWarnings("unchecked")
    static JsonObject topicQueueTable(DefaultMessageStore s) {
        JsonObject o = new JsonObject();
        Object t = null;
        try {
            t = Store.call(s.getCommitLog(), "getTopicQueueTable");
        } catch (Exception e) {
            try {
                Object cqs = Store.call(s, "getQueueStore");
                t = Store.call(cqs, "getTopicQueueTable");
            } catch (Exception e2) {
                return null;
            }
        }
        if (t instanceof Map) {
            for (Map.Entry<String, Long> e : new TreeMap<>((Map<String, Long>) t).entrySet()) {
                o.addProperty(e.getKey(), e.getValue());
            }
        }
        return o;
    }

    static JsonObject consumeQueues(DefaultMessageStore s) throws Exception {
        JsonObject o = new JsonObject();
        Map<String, ? extends Map<Integer, ?>> table = s.getConsumeQueueTable();
        TreeMap<String, Object> sorted = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : table.entrySet()) {
            for (Map.Entry<Integer, ?> q : t.getValue().entrySet()) {
                if (BatchView.isBatch(q.getValue()) || RocksView.isRocks(q.getValue())) {
                    continue;   // batch_consume_queues, rocksdb_consume_queue
                }
                sorted.put(t.getKey() + "/" + q.getKey(), q.getValue());
            }
        }
        for (Map.Entry<String, Object> e : sorted.entrySet()) {
            String[] tq = splitTq(e.getKey());
            ConsumeQueue cq = (ConsumeQueue) e.getValue();
            JsonObject q = new JsonObject();
            long minOff = cq.getMinOffsetInQueue();
            long maxOff = cq.getMaxOffsetInQueue();
            q.addProperty("min_offset", minOff);
            q.addProperty("max_offset", maxOff);
            q.addProperty("max_physic_offset", cq.getMaxPhysicOffset());
            JsonArray entries = new JsonArray();
            long i = minOff;
            while (i < maxOff) {
                SelectMappedBufferResult r = cq.getIndexBuffer(i);
                if (r == null) {
                    break;
                }
                try {
                    ByteBuffer b = r.getByteBuffer();
                    int units = r.getSize() / 20;
                    if (units == 0) {
                        break;
                    }
                    for (int u = 0; u < units && i < maxOff; u++, i++) {
                        long phys = b.getLong(u * 20);
                        int size = b.getInt(u * 20 + 8);
                        long tags = b.getLong(u * 20 + 12);
                        JsonObject en = new JsonObject();
                        en.addProperty("cq_offset", i);
                        en.addProperty("phys_offset", phys);
                        en.addProperty("size", size);
                        en.addProperty("tags_code", tags);
                        MessageExt m = null;
                        try {
                            m = s.lookMessageByOffset(phys, size);
                        } catch (Throwable ignored) {
                            m = null;
                        }
                        if (m != null) {
                            JsonObject mm = new JsonObject();
                            byte[] body = m.getBody();
                            mm.addProperty("body_sha256", sha256(body));
                            mm.addProperty("keys", m.getKeys());
                            mm.addProperty("queue_id", m.getQueueId());
                            mm.addProperty("queue_offset", m.getQueueOffset());
                            mm.addProperty("store_size", m.getStoreSize());
                            mm.addProperty("tags", m.getTags());
                            mm.addProperty("topic", m.getTopic());
                            mm.addProperty("uniq_key", m.getProperty("UNIQ_KEY"));
                            en.add("message", mm);
                            en.addProperty("consistent", m.getTopic().equals(tq[0])
                                && m.getQueueId() == Integer.parseInt(tq[1]) && m.getQueueOffset() == i
                                && m.getStoreSize() == size);
                        } else {
                            en.add("message", JsonNull.INSTANCE);
                            en.addProperty("consistent", false);
                        }
                        entries.add(en);
                    }
                } finally {
                    r.release();
                }
            }
            q.add("entries", entries);
            o.add(e.getKey(), q);
        }
        return o;
    }

    static String[] splitTq(String k) {
        int i = k.lastIndexOf('/');
        return new String[] {k.substring(0, i), k.substring(i + 1)};
    }

    static JsonArray queries(DefaultMessageStore s, JsonArray recs, JsonArray extra) {
        TreeSet<List<String>> fromLog = new TreeSet<>(Viewer::cmpPair);
        for (JsonElement e : recs) {
            JsonObject r = e.getAsJsonObject();
            if (!r.has("topic")) {
                continue;
            }
            String topic = r.get("topic").getAsString();
            if (!r.get("keys").isJsonNull()) {
                for (String k : r.get("keys").getAsString().split(" ")) {
                    if (!k.isEmpty()) {
                        fromLog.add(Arrays.asList(topic, k));
                    }
                }
            }
            if (!r.get("uniq_key").isJsonNull()) {
                fromLog.add(Arrays.asList(topic, r.get("uniq_key").getAsString()));
            }
        }
        TreeSet<List<String>> all = new TreeSet<>(Viewer::cmpPair);
        all.addAll(fromLog);
        if (extra != null) {
            for (JsonElement e : extra) {
                if (e.isJsonArray()) {
                    all.add(Arrays.asList(e.getAsJsonArray().get(0).getAsString(), e.getAsJsonArray().get(1).getAsString()));
                } else {
                    JsonObject o = e.getAsJsonObject();
                    all.add(Arrays.asList(o.get("topic").getAsString(), o.get("key").getAsString()));
                }
            }
        }
        JsonArray out = new JsonArray();
        for (List<String> tk : all) {
            QueryMessageResult q = s.queryMessage(tk.get(0), tk.get(1), 64, 0, Long.MAX_VALUE);
            List<Long> offs = new ArrayList<>();
            List<Long> having = new ArrayList<>();
            try {
                for (ByteBuffer b : q.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(b.duplicate(), false, false);
                    if (m == null) {
                        continue;
                    }
                    offs.add(m.getCommitLogOffset());
                    boolean has = tk.get(1).equals(m.getProperty("UNIQ_KEY"));
                    if (m.getKeys() != null) {
                        has |= Arrays.asList(m.getKeys().split(" ")).contains(tk.get(1));
                    }
                    if (has) {
                        having.add(m.getCommitLogOffset());
                    }
                }
            } finally {
                q.release();
            }
            List<Long> raw = new ArrayList<>(offs);
            offs = new ArrayList<>(new TreeSet<>(offs));
            having = new ArrayList<>(new TreeSet<>(having));
            JsonObject o = new JsonObject();
            o.addProperty("index_last_update_phyoffset", q.getIndexLastUpdatePhyoffset());
            o.addProperty("index_last_update_timestamp", q.getIndexLastUpdateTimestamp());
            o.addProperty("key", tk.get(1));
            o.addProperty("key_in_recovered_commitlog", fromLog.contains(tk));
            JsonArray a = new JsonArray();
            offs.forEach(a::add);
            o.add("phys_offsets", a);
            JsonArray ra = new JsonArray();
            raw.forEach(ra::add);
            o.add("phys_offsets_raw", ra);
            JsonArray h = new JsonArray();
            having.forEach(h::add);
            o.add("phys_offsets_whose_message_has_this_key", h);
            o.addProperty("topic", tk.get(0));
            out.add(o);
        }
        return out;
    }

    /**
     * 5.5 also indexes each message's TAGS (key "topic#TAG#tags") and can query by it: for every
     * (topic, tags) of the recovered records, queryMessage(topic, tags, 64, 0, MAX, INDEX_TAG_TYPE, null).
     * null for versions without tag index.
     */
    static JsonArray tagQueries(DefaultMessageStore s, JsonArray recs) throws Exception {
        Method q7 = null;
        for (Method m : s.getClass().getMethods()) {
            if (m.getName().equals("queryMessage") && m.getParameterCount() == 7) {
                q7 = m;
            }
        }
        String tagType;
        try {
            tagType = (String) Class.forName("org.apache.rocketmq.common.message.MessageConst")
                .getField("INDEX_TAG_TYPE").get(null);
        } catch (NoSuchFieldException e) {
            return null;
        }
        if (q7 == null) {
            return null;
        }
        TreeSet<List<String>> pairs = new TreeSet<>(Viewer::cmpPair);
        for (JsonElement e : recs) {
            JsonObject r = e.getAsJsonObject();
            if (r.has("topic") && !r.get("tags").isJsonNull() && !r.get("tags").getAsString().isEmpty()) {
                pairs.add(Arrays.asList(r.get("topic").getAsString(), r.get("tags").getAsString()));
            }
        }
        JsonArray out = new JsonArray();
        for (List<String> tk : pairs) {
            QueryMessageResult q = (QueryMessageResult) q7.invoke(s, tk.get(0), tk.get(1), 64, 0L, Long.MAX_VALUE,
                tagType, null);
            List<Long> offs = new ArrayList<>();
            try {
                for (ByteBuffer b : q.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(b.duplicate(), false, false);
                    if (m != null) {
                        offs.add(m.getCommitLogOffset());
                    }
                }
            } finally {
                q.release();
            }
            JsonObject o = new JsonObject();
            o.addProperty("tag", tk.get(1));
            JsonArray a = new JsonArray();
            new TreeSet<>(offs).forEach(a::add);
            o.add("phys_offsets", a);
            JsonArray ra = new JsonArray();
            offs.forEach(ra::add);
            o.add("phys_offsets_raw", ra);
            o.addProperty("topic", tk.get(0));
            out.add(o);
        }
        return out;
    }

    static int cmpPair(List<String> a, List<String> b) {
        int c = a.get(0).compareTo(b.get(0));
        return c != 0 ? c : a.get(1).compareTo(b.get(1));
    }
}
