package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageBatch;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;

import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The `write` verb: puts a scenario's messages into a new store the way the broker's send path builds
 * them (client Message -> properties string -> SendMessageProcessor -> DefaultMessageStore.putMessage),
 * then shuts down cleanly or is SIGKILLed in a child JVM.
 */
final class Put {

    static final String HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC";
    static final String OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
    static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";
    static final String INNER_NUM = "INNER_NUM";            // MessageConst.PROPERTY_INNER_NUM (5.x)
    static final int INNER_BATCH_FLAG = 0x1 << 7;           // MessageSysFlag.INNER_BATCH_FLAG (5.x)

    static JsonObject write(String version, JsonObject scen, Path out, long timeoutMs) throws Exception {
        Path storeDir = out.resolve("store");
        // "onto_existing": true puts onto the store already there (a DLedger member's later run:
        // its member elects itself in a new term and appends after its ledger; issue 38's group diff)
        boolean onto = scen.has("onto_existing") && scen.get("onto_existing").getAsBoolean();
        if (!onto && Files.isDirectory(storeDir) && Files.list(storeDir).findAny().isPresent()) {
            throw new Main.UsageError("write: " + storeDir + " exists and is not empty");
        }
        Files.createDirectories(storeDir);
        JsonObject end = scen.has("end") ? scen.getAsJsonObject("end") : new JsonObject();
        String mode = end.has("mode") ? end.get("mode").getAsString() : "clean";
        JsonObject res;
        if (mode.equals("clean")) {
            res = Timeout.run(() -> clean(version, scen, storeDir), timeoutMs, "write to " + storeDir);
        } else if (mode.equals("kill")) {
            res = kill(version, scen, out, timeoutMs);
        } else {
            throw new Main.UsageError("end.mode must be clean or kill, not " + mode);
        }
        try (java.io.Writer w = new OutputStreamWriter(new FileOutputStream(out.resolve("result.json").toFile()),
            StandardCharsets.UTF_8)) {
            Json.write(w, res, true);
        }
        return res;
    }

    static JsonObject config(JsonObject scen) {
        return scen.has("config") ? scen.getAsJsonObject("config") : new JsonObject();
    }

    static JsonObject header(String version, JsonObject scen, Path storeDir, boolean clean) throws IOException {
        JsonObject r = new JsonObject();
        r.addProperty("version", version);
        r.addProperty("rocketmq_version", version);
        r.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        r.addProperty("clean_shutdown", clean);
        r.addProperty("abort_file_present", Files.exists(storeDir.resolve("abort")));
        r.add("files_as_left_by_rocketmq", Viewer.sizes(storeDir, true));
        return r;
    }

    /**
     * A mixed store (scenario "classic_first": N with enableDLegerCommitLog): the first N messages are
     * put by a classic store (DLedger off), which shuts down cleanly; the DLedger commitlog then opens
     * the same store (it recovers the classic files, pads the last one and starts its entries at the
     * next file's offset) and takes the rest.
     */
    static int classicFirst(JsonObject scen) {
        return scen.has("classic_first") ? scen.get("classic_first").getAsInt() : 0;
    }

    static void classicPhase(JsonObject scen, Path storeDir, int n, Map<Integer, JsonObject> done,
        List<JsonObject> results, Log log) throws Exception {
        MessageStoreConfig c = Store.config(DLedger.classic(config(scen)), storeDir);
        DefaultMessageStore s = Store.open(c);
        if (!s.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed on a new store");
        }
        Object schedule = Viewer.holdSchedule(s);
        s.start();
        JsonArray msgs = scen.getAsJsonArray("messages");
        for (int i = 0; i < n && i < msgs.size(); i++) {
            Built b = build(s, c, msgs.get(i).getAsJsonObject(), i, done, "classic");
            JsonObject r = b.info;
            PutMessageResult pr = put(s, b);
            if (b.inner != null) {
                describe(r, b.inner);
            }
            fill(r, pr);
            r.addProperty("acknowledged", ok(pr));
            if (b.op != null && ok(pr)) {
                putOp(s, b, r);
            }
            done.put(i, r);
            results.add(r);
            if (log != null) {
                log.line("attempt", b.info);
                log.line("ack", r);
            }
        }
        Store.waitReput(s, 60_000);
        Viewer.persistSchedule(schedule);
        QuickShutdown.run(s::shutdown);
    }

    static JsonObject clean(String version, JsonObject scen, Path storeDir) throws Exception {
        JsonArray msgs = scen.has("messages") ? scen.getAsJsonArray("messages") : new JsonArray();
        Map<Integer, JsonObject> done = new ConcurrentHashMap<>();
        List<JsonObject> results = new ArrayList<>();
        int first = classicFirst(scen);
        if (first > 0) {
            classicPhase(scen, storeDir, first, done, results, null);
        }
        MessageStoreConfig c = Store.config(config(scen), storeDir);
        DefaultMessageStore s = Store.open(c, config(scen));
        if (!s.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed on the store");
        }
        JsonObject end = scen.has("end") ? scen.getAsJsonObject("end") : new JsonObject();
        boolean scheduleRuns = end.has("schedule_service") && end.get("schedule_service").getAsBoolean();
        Object schedule = scheduleRuns ? null : Viewer.holdSchedule(s);
        s.start();
        DLedger.awaitLeader(s, 60_000);
        for (int i = first; i < msgs.size(); i++) {
            Built b = build(s, c, msgs.get(i).getAsJsonObject(), i, done, "main");
            JsonObject r = b.info;
            PutMessageResult pr = put(s, b);
            if (b.inner != null) {
                describe(r, b.inner);   // 4.x CommitLog rewrites delay messages in place
            }
            fill(r, pr);
            r.addProperty("acknowledged", ok(pr));
            done.put(i, r);
            if (b.op != null && ok(pr)) {
                putOp(s, b, r);
            }
            results.add(r);
        }
        DLedger.awaitCommitted(s, 60_000);
        Store.waitReput(s, 60_000);
        if (end.has("wait_ms")) {
            Thread.sleep(end.get("wait_ms").getAsLong());
        }
        Viewer.persistSchedule(schedule);
        QuickShutdown.run(s::shutdown);
        JsonObject res = header(version, scen, storeDir, !Files.exists(storeDir.resolve("abort")));
        JsonArray arr = new JsonArray();
        results.forEach(arr::add);
        res.add("messages", arr);
        return res;
    }

    static boolean ok(PutMessageResult pr) {
        return pr != null && pr.getPutMessageStatus() != null && pr.getPutMessageStatus().name().equals("PUT_OK");
    }

    static void fill(JsonObject r, PutMessageResult pr) {
        r.addProperty("put_status", pr == null || pr.getPutMessageStatus() == null ? null
            : pr.getPutMessageStatus().name());
        AppendMessageResult a = pr == null ? null : pr.getAppendMessageResult();
        if (a != null && a.getWroteBytes() > 0) {
            r.addProperty("phys_offset", a.getWroteOffset());
            r.addProperty("wrote_bytes", a.getWroteBytes());
            r.addProperty("queue_offset", a.getLogicsOffset());
            r.addProperty("msg_id", a.getMsgId());
            r.addProperty("store_timestamp", a.getStoreTimestamp());
            r.addProperty("msg_num", a.getMsgNum());
        } else {
            r.add("phys_offset", null);
            r.add("wrote_bytes", null);
            r.add("queue_offset", null);
            r.add("msg_id", null);
            r.add("store_timestamp", null);
        }
    }

    static final class Built {
        Inner inner;
        MessageExtBatch batch;   // a client batch (DefaultMQProducer.send(Collection)): inner is null
        JsonObject info = new JsonObject();
        Inner op;   // the op-half record that follows a commit or rollback
    }

    static String str(JsonObject m, String k, String def) {
        return m.has(k) && !m.get(k).isJsonNull() ? m.get(k).getAsString() : def;
    }

    static long lng(JsonObject m, String k, long def) {
        return m.has(k) && !m.get(k).isJsonNull() ? m.get(k).getAsLong() : def;
    }

    static InetSocketAddress addr(String s) throws IOException {
        int c = s.lastIndexOf(':');
        String h = s.substring(0, c);
        if (h.startsWith("[") && h.endsWith("]")) {
            h = h.substring(1, h.length() - 1);
        }
        return new InetSocketAddress(InetAddress.getByName(h), Integer.parseInt(s.substring(c + 1)));
    }

    /** Body bytes: body_b64, or body_len bytes of the SHA-256 stream sha256("SEED:0") || sha256("SEED:1") ... */
    static byte[] body(JsonObject m) throws Exception {
        if (m.has("body_b64")) {
            return Base64.getDecoder().decode(m.get("body_b64").getAsString());
        }
        if (m.has("body_text")) {
            return m.get("body_text").getAsString().getBytes(StandardCharsets.UTF_8);
        }
        int n = (int) lng(m, "body_len", 16);
        long seed = lng(m, "body_seed", 0);
        byte[] b = new byte[n];
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        for (int off = 0, k = 0; off < n; k++) {
            byte[] d = md.digest((seed + ":" + k).getBytes(StandardCharsets.UTF_8));
            int len = Math.min(32, n - off);
            System.arraycopy(d, 0, b, off, len);
            off += len;
        }
        return b;
    }

    static int maxDelayLevel(MessageStoreConfig c) {
        return c.getMessageDelayLevel().trim().split(" +").length;
    }

    /** Builds message seq as client + broker would; commit/rollback wait for their prepare's result. */
    static Built build(DefaultMessageStore s, MessageStoreConfig c, JsonObject m, int seq,
        Map<Integer, JsonObject> done, String thread) throws Exception {
        Built b = new Built();
        String tx = str(m, "transaction", "none");
        JsonObject info = b.info;
        info.addProperty("seq", seq);
        info.addProperty("thread", thread);
        info.addProperty("transaction", tx);
        int innerNum = 0;
        if (m.has("inner_batch") && !m.get("inner_batch").isJsonNull()) {
            // an inner batch: one record standing for inner_batch messages (INNER_BATCH_FLAG, INNER_NUM), as
            // the store's own BatchConsumeQueue tests put them; DefaultMessageStore.asyncPutMessage refuses the
            // flag unless the topic's queue.type is BatchCQ (config topic_attributes), and adds INNER_BASE
            if (Store.major() < 5) {
                throw new Main.UsageError("message " + seq + ": inner_batch needs RocketMQ 5.x");
            }
            innerNum = m.get("inner_batch").getAsInt();
            if (innerNum < 1 || innerNum > Short.MAX_VALUE || m.has("batch") || !tx.equals("none")) {
                throw new Main.UsageError("message " + seq + ": inner_batch must be 1.." + Short.MAX_VALUE
                    + ", on a plain message (no batch, no transaction)");
            }
        }
        if (m.has("batch") && !m.get("batch").isJsonNull()) {
            return buildBatch(m, seq, b);
        }
        if (tx.equals("commit") || tx.equals("rollback") || tx.equals("rollback_raw") || tx.equals("commit_raw")) {
            return endTransaction(s, m, seq, done, b, tx);
        }
        String topic = str(m, "topic", "TopicA");
        int queueId = (int) lng(m, "queue_id", 0);
        String tags = str(m, "tags", null);
        String keys = str(m, "keys", null);
        int flag = (int) lng(m, "flag", 0);
        byte[] body = body(m);
        boolean wait = !m.has("wait_store_msg_ok") || m.get("wait_store_msg_ok").getAsBoolean();
        // the client's Message
        Message cm = new Message(topic, tags, keys, flag, body, wait);
        if (m.has("properties")) {
            for (Map.Entry<String, JsonElement> e : m.getAsJsonObject("properties").entrySet()) {
                MessageAccessor.putProperty(cm, e.getKey(), e.getValue().getAsString());
            }
        }
        int delay = (int) lng(m, "delay_level", 0);
        if (delay > 0) {
            cm.setDelayTimeLevel(delay);
        }
        if (!m.has("uniq_key")) {
            MessageClientIDSetter.setUniqID(cm);
        } else if (!m.get("uniq_key").isJsonNull()) {
            MessageAccessor.putProperty(cm, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, m.get("uniq_key").getAsString());
        }
        int sysFlag = (int) lng(m, "sys_flag", 0);
        if (tx.equals("prepare") || tx.equals("prepare_raw")) {
            MessageAccessor.putProperty(cm, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
            MessageAccessor.putProperty(cm, MessageConst.PROPERTY_PRODUCER_GROUP, str(m, "producer_group", "TxGroup"));
            sysFlag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE;
        } else if (!tx.equals("none")) {
            throw new Main.UsageError("message " + seq + ": unknown transaction " + tx);
        }
        String wire = MessageDecoder.messageProperties2String(cm.getProperties());

        // the broker's SendMessageProcessor.asyncSendMessage
        Inner in = new Inner();
        in.setTopic(topic);
        in.setQueueId(queueId);
        in.setSysFlag(sysFlag);
        in.setBody(body);
        in.setFlag(flag);
        Map<String, String> orig = MessageDecoder.string2messageProperties(wire);
        MessageAccessor.setProperties(in, orig);
        in.setBornTimestamp(lng(m, "born_timestamp", System.currentTimeMillis()));
        in.setBornHost(addr(str(m, "born_host", "10.0.0.1:40000")));
        in.setStoreHost(addr(str(m, "store_host", "192.168.0.10:10911")));
        in.setReconsumeTimes((int) lng(m, "reconsume_times", 0));
        MessageAccessor.putProperty(in, MessageConst.PROPERTY_CLUSTER, str(m, "cluster", "DefaultCluster"));
        if (innerNum > 0) {
            MessageAccessor.putProperty(in, INNER_NUM, String.valueOf(innerNum));
            in.setSysFlag(in.getSysFlag() | INNER_BATCH_FLAG);
        }
        if (orig.containsKey(MessageConst.PROPERTY_WAIT_STORE_MSG_OK)) {
            String w = orig.remove(MessageConst.PROPERTY_WAIT_STORE_MSG_OK);
            in.setPropertiesString(MessageDecoder.messageProperties2String(in.getProperties()));
            orig.put(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, w);
        } else {
            in.setPropertiesString(MessageDecoder.messageProperties2String(in.getProperties()));
        }
        in.setTagsCode(Inner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, in.getTags()));
        if (in.getBornHost() instanceof InetSocketAddress
            && ((InetSocketAddress) in.getBornHost()).getAddress() instanceof java.net.Inet6Address) {
            in.setBornHostV6Flag();
        }
        if (((InetSocketAddress) in.getStoreHost()).getAddress() instanceof java.net.Inet6Address) {
            in.setStoreHostAddressV6Flag();
        }
        if (tx.equals("prepare")) {
            // TransactionalMessageBridge.parseHalfMessageInner
            MessageAccessor.putProperty(in, MessageConst.PROPERTY_REAL_TOPIC, in.getTopic());
            MessageAccessor.putProperty(in, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(in.getQueueId()));
            in.setSysFlag(MessageSysFlag.resetTransactionValue(in.getSysFlag(), MessageSysFlag.TRANSACTION_NOT_TYPE));
            in.setTopic(HALF_TOPIC);
            in.setQueueId(0);
            in.setPropertiesString(MessageDecoder.messageProperties2String(in.getProperties()));
        }
        if (Store.major() >= 5) {
            scheduleRewrite5(c, in);
        }
        info.addProperty("requested_topic", topic);
        info.addProperty("requested_queue_id", queueId);
        info.addProperty("delay_level", delay);
        b.inner = in;
        describe(info, in);
        return b;
    }

    /** DefaultMessageStore.putMessage, or putMessages for a client batch. */
    static PutMessageResult put(DefaultMessageStore s, Built b) {
        return b.batch != null ? s.putMessages(b.batch) : s.putMessage(b.inner);
    }

    /**
     * A client batch as DefaultMQProducer.batch builds it (MessageBatch.generateFromList: one topic, the first
     * message's WAIT; each message gets its UNIQ_KEY; the body is MessageDecoder.encodeMessages of them; the
     * batch itself carries only WAIT, no UNIQ_KEY, never compressed) and SendMessageProcessor's batch path turns
     * it into a MessageExtBatch (the header's properties plus CLUSTER, born/store hosts, sysflag 0 for a
     * single-tag topic) for DefaultMessageStore.putMessages. The store's own batch encoder then writes one record
     * per message, each with the batch's properties appended to its own. Entry fields: topic, queue_id,
     * born_host, store_host, born_timestamp, and "batch": [{tags, keys, properties, body_*, uniq_key}, ...].
     */
    static Built buildBatch(JsonObject m, int seq, Built b) throws Exception {
        String topic = str(m, "topic", "TopicA");
        int queueId = (int) lng(m, "queue_id", 0);
        List<Message> list = new ArrayList<>();
        JsonArray subs = m.getAsJsonArray("batch");
        for (int k = 0; k < subs.size(); k++) {
            JsonObject sm = subs.get(k).getAsJsonObject();
            Message cm = new Message(topic, str(sm, "tags", null), str(sm, "keys", null), 0, body(sm), true);
            if (sm.has("properties")) {
                for (Map.Entry<String, JsonElement> e : sm.getAsJsonObject("properties").entrySet()) {
                    MessageAccessor.putProperty(cm, e.getKey(), e.getValue().getAsString());
                }
            }
            list.add(cm);
        }
        MessageBatch mb;
        try {
            mb = MessageBatch.generateFromList(list);
        } catch (Exception e) {
            throw new Main.UsageError("message " + seq + ": the client refuses this batch: " + e.getMessage());
        }
        int k = 0;
        for (Message cm : mb) {
            JsonObject sm = subs.get(k++).getAsJsonObject();
            if (!sm.has("uniq_key")) {
                MessageClientIDSetter.setUniqID(cm);
            } else if (!sm.get("uniq_key").isJsonNull()) {
                MessageAccessor.putProperty(cm, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, sm.get("uniq_key").getAsString());
            }
        }
        mb.setBody(mb.encode());
        String wire = MessageDecoder.messageProperties2String(mb.getProperties());

        MessageExtBatch x = new MessageExtBatch();
        x.setTopic(topic);
        x.setQueueId(queueId);
        x.setSysFlag(0);
        x.setFlag(mb.getFlag());
        MessageAccessor.setProperties(x, MessageDecoder.string2messageProperties(wire));
        x.setBody(mb.getBody());
        x.setBornTimestamp(lng(m, "born_timestamp", System.currentTimeMillis()));
        x.setBornHost(addr(str(m, "born_host", "10.0.0.1:40000")));
        x.setStoreHost(addr(str(m, "store_host", "192.168.0.10:10911")));
        x.setReconsumeTimes(0);
        MessageAccessor.putProperty(x, MessageConst.PROPERTY_CLUSTER, str(m, "cluster", "DefaultCluster"));
        b.batch = x;
        JsonObject info = b.info;
        info.addProperty("requested_topic", topic);
        info.addProperty("requested_queue_id", queueId);
        info.addProperty("delay_level", 0);
        info.addProperty("topic", topic);
        info.addProperty("queue_id", queueId);
        info.addProperty("batch_count", list.size());
        info.addProperty("body_len", x.getBody().length);
        info.addProperty("born_host", Viewer.host(x.getBornHost()));
        info.addProperty("store_host", Viewer.host(x.getStoreHost()));
        info.addProperty("born_timestamp", x.getBornTimestamp());
        return b;
    }

    /**
     * 5.x moved the delay-level rewrite out of CommitLog into the broker's put-message hook
     * (HookUtils.handleScheduleMessage): done here in the same way, so that a 5.x store gets the
     * records a 5.x broker writes.
     */
    static void scheduleRewrite5(MessageStoreConfig c, Inner in) {
        int tran = MessageSysFlag.getTransactionValue(in.getSysFlag());
        if (tran != MessageSysFlag.TRANSACTION_NOT_TYPE && tran != MessageSysFlag.TRANSACTION_COMMIT_TYPE) {
            return;
        }
        if (in.getDelayTimeLevel() <= 0) {
            return;
        }
        if (in.getDelayTimeLevel() > maxDelayLevel(c)) {
            in.setDelayTimeLevel(maxDelayLevel(c));
        }
        MessageAccessor.putProperty(in, MessageConst.PROPERTY_REAL_TOPIC, in.getTopic());
        MessageAccessor.putProperty(in, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(in.getQueueId()));
        in.setPropertiesString(MessageDecoder.messageProperties2String(in.getProperties()));
        in.setTopic(SCHEDULE_TOPIC);
        in.setQueueId(in.getDelayTimeLevel() - 1);
    }

    static void describe(JsonObject info, Inner in) {
        info.addProperty("topic", in.getTopic());
        info.addProperty("queue_id", in.getQueueId());
        // what the record will carry: the properties string (the broker sometimes changes the map after it)
        Map<String, String> stored = MessageDecoder.string2messageProperties(
            in.getPropertiesString() == null ? "" : in.getPropertiesString());
        info.addProperty("tags", stored.get(MessageConst.PROPERTY_TAGS));
        info.addProperty("keys", stored.get(MessageConst.PROPERTY_KEYS));
        info.addProperty("uniq_key", stored.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        info.addProperty("flag", in.getFlag());
        info.addProperty("sys_flag", in.getSysFlag());
        info.addProperty("properties_string", in.getPropertiesString());
        byte[] body = in.getBody() == null ? new byte[0] : in.getBody();
        info.addProperty("body_len", body.length);
        info.addProperty("body_sha256", Viewer.sha256(body));
        info.addProperty("born_host", Viewer.host(in.getBornHost()));
        info.addProperty("store_host", Viewer.host(in.getStoreHost()));
        info.addProperty("born_timestamp", in.getBornTimestamp());
    }

    /** EndTransactionProcessor: the commit record (and the op-half "d" record), or for a rollback only the op record. */
    static Built endTransaction(DefaultMessageStore s, JsonObject m, int seq, Map<Integer, JsonObject> done, Built b,
        String tx) throws Exception {
        if (!m.has("prepared_seq") || m.get("prepared_seq").isJsonNull()) {
            throw new Main.UsageError("message " + seq + ": " + tx + " needs prepared_seq");
        }
        int p = m.get("prepared_seq").getAsInt();
        if (p >= seq) {
            throw new Main.UsageError("message " + seq + ": prepared_seq must name an earlier message");
        }
        JsonObject prep = null;
        for (int i = 0; i < 60_000 && (prep = done.get(p)) == null; i++) {
            Thread.sleep(1);   // kill mode: the prepare is being put by another writer
        }
        if (prep == null || prep.get("phys_offset").isJsonNull()) {
            throw new IllegalStateException("message " + seq + ": its prepare " + p + " was not stored");
        }
        long halfOffset = prep.get("phys_offset").getAsLong();
        long halfQueueOffset = prep.get("queue_offset").getAsLong();
        MessageExt half = s.lookMessageByOffset(halfOffset);
        b.info.addProperty("prepared_seq", p);
        b.info.addProperty("requested_topic", half.getProperty(MessageConst.PROPERTY_REAL_TOPIC));
        b.info.add("requested_queue_id", null);
        b.info.addProperty("delay_level", 0);
        Inner op = opRecord(half, halfQueueOffset);
        if (tx.equals("commit") || tx.equals("commit_raw")) {
            Inner in = new Inner();
            String realTopic = half.getProperty(MessageConst.PROPERTY_REAL_TOPIC);
            String realQid = half.getProperty(MessageConst.PROPERTY_REAL_QUEUE_ID);
            in.setTopic(realTopic != null ? realTopic : half.getTopic());
            in.setQueueId(realQid != null ? Integer.parseInt(realQid) : half.getQueueId());
            in.setBody(half.getBody());
            in.setFlag(half.getFlag());
            in.setBornTimestamp(half.getBornTimestamp());
            in.setBornHost(half.getBornHost());
            in.setStoreHost(half.getStoreHost());
            in.setReconsumeTimes(half.getReconsumeTimes());
            in.setWaitStoreMsgOK(false);
            in.setTransactionId(half.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            in.setSysFlag(half.getSysFlag());
            TopicFilterType tft = (in.getSysFlag() & MessageSysFlag.MULTI_TAGS_FLAG) == MessageSysFlag.MULTI_TAGS_FLAG
                ? TopicFilterType.MULTI_TAG : TopicFilterType.SINGLE_TAG;
            MessageAccessor.setProperties(in, half.getProperties());
            in.setPropertiesString(MessageDecoder.messageProperties2String(half.getProperties()));
            in.setTagsCode(Inner.tagsString2tagsCode(tft, in.getTags()));
            // the broker clears these after it has made the properties string: the stored record keeps them
            MessageAccessor.clearProperty(in, MessageConst.PROPERTY_REAL_TOPIC);
            MessageAccessor.clearProperty(in, MessageConst.PROPERTY_REAL_QUEUE_ID);
            in.setSysFlag(MessageSysFlag.resetTransactionValue(in.getSysFlag(), MessageSysFlag.TRANSACTION_COMMIT_TYPE));
            in.setQueueOffset(halfQueueOffset);
            in.setPreparedTransactionOffset(halfOffset);
            in.setStoreTimestamp(half.getStoreTimestamp());
            MessageAccessor.clearProperty(in, MessageConst.PROPERTY_TRANSACTION_PREPARED);
            b.inner = in;
            b.op = tx.equals("commit") ? op : null;
        } else {
            if (tx.equals("rollback_raw")) {
                // a ROLLBACK_TYPE record (what pre-4.3 brokers and other writers leave), not the broker's op record
                Inner in = opRecord(half, halfQueueOffset);
                in.setTopic(half.getTopic());
                in.setQueueId(half.getQueueId());
                in.setSysFlag(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE);
                in.setPreparedTransactionOffset(halfOffset);
                b.inner = in;
            } else {
                b.inner = op;
            }
        }
        describe(b.info, b.inner);
        return b;
    }

    /** TransactionalMessageBridge.addRemoveTagInTransactionOp -> makeOpMessageInner. */
    static Inner opRecord(MessageExt half, long halfQueueOffset) {
        Message message = new Message(OP_TOPIC, "d", String.valueOf(halfQueueOffset).getBytes(StandardCharsets.UTF_8));
        Inner in = new Inner();
        in.setTopic(message.getTopic());
        in.setBody(message.getBody());
        in.setQueueId(half.getQueueId());
        in.setTags(message.getTags());
        in.setTagsCode(Inner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, in.getTags()));
        in.setSysFlag(0);
        MessageAccessor.setProperties(in, message.getProperties());
        in.setPropertiesString(MessageDecoder.messageProperties2String(message.getProperties()));
        in.setBornTimestamp(System.currentTimeMillis());
        in.setBornHost(half.getStoreHost());
        in.setStoreHost(half.getStoreHost());
        in.setWaitStoreMsgOK(false);
        MessageClientIDSetter.setUniqID(in);
        if (((InetSocketAddress) in.getStoreHost()).getAddress() instanceof java.net.Inet6Address) {
            in.setBornHostV6Flag();
            in.setStoreHostAddressV6Flag();
        }
        return in;
    }

    static void putOp(DefaultMessageStore s, Built b, JsonObject r) {
        PutMessageResult pr = s.putMessage(b.op);
        JsonObject o = new JsonObject();
        fill(o, pr);
        r.add("op_record", o);
    }

    // ---------------------------------------------------------------- kill mode

    static JsonObject kill(String version, JsonObject scen, Path out, long timeoutMs) throws Exception {
        Path in = out.resolve("scenario.input.json");
        Files.write(in, Json.line(scen).getBytes(StandardCharsets.UTF_8));
        Path log = out.resolve("put-log.jsonl");
        Files.deleteIfExists(log);
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            cmd.add(a);
        }
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(Main.class.getName());
        cmd.add("write-child");
        cmd.add("--version");
        cmd.add(version);
        cmd.add("--scenario");
        cmd.add(in.toString());
        cmd.add("--out");
        cmd.add(out.toString());
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectErrorStream(true);
        pb.redirectOutput(out.resolve("child.log").toFile());
        Process p = pb.start();
        if (!p.waitFor(timeoutMs, TimeUnit.MILLISECONDS)) {
            p.destroyForcibly();
            throw new RuntimeException("kill-mode writer did not die within " + timeoutMs + " ms (see " + out.resolve("child.log") + ")");
        }
        int rc = p.exitValue();
        if (rc != 137) {
            String tail = new String(Files.readAllBytes(out.resolve("child.log")), StandardCharsets.UTF_8);
            tail = tail.length() > 400 ? tail.substring(tail.length() - 400) : tail;
            throw new RuntimeException("kill-mode writer exited " + rc + " instead of dying of SIGKILL: " + tail.trim());
        }
        Map<Integer, JsonObject> attempts = new HashMap<>();
        Map<Integer, JsonObject> acks = new HashMap<>();
        JsonArray events = new JsonArray();
        for (String line : Files.readAllLines(log, StandardCharsets.UTF_8)) {
            JsonObject e;
            try {
                e = JsonParser.parseString(line).getAsJsonObject();
            } catch (Exception partial) {
                continue;   // the last line may be cut by the kill
            }
            String ev = e.get("ev").getAsString();
            e.remove("ev");
            if (ev.equals("attempt")) {
                attempts.put(e.get("seq").getAsInt(), e);
            } else if (ev.equals("ack")) {
                acks.put(e.get("seq").getAsInt(), e);
            } else {
                e.addProperty("event", ev);
                events.add(e);
            }
        }
        Path storeDir = out.resolve("store");
        JsonObject res = header(version, scen, storeDir, false);
        res.add("events", events);
        JsonArray msgs = scen.has("messages") ? scen.getAsJsonArray("messages") : new JsonArray();
        JsonArray arr = new JsonArray();
        int nAck = 0;
        for (int i = 0; i < msgs.size(); i++) {
            JsonObject r;
            if (acks.containsKey(i)) {
                r = acks.get(i);
                r.addProperty("attempted", true);
                r.addProperty("acknowledged", r.has("put_status") && "PUT_OK".equals(str(r, "put_status", "")));
                nAck += r.get("acknowledged").getAsBoolean() ? 1 : 0;
            } else if (attempts.containsKey(i)) {
                r = attempts.get(i);
                r.addProperty("attempted", true);
                r.addProperty("acknowledged", false);
            } else {
                r = new JsonObject();
                r.addProperty("seq", i);
                r.addProperty("attempted", false);
                r.addProperty("acknowledged", false);
            }
            if (!r.has("put_status")) {
                fill(r, null);
            }
            arr.add(r);
        }
        res.addProperty("acknowledged_count", nAck);
        res.addProperty("attempted_count", attempts.size());
        res.add("messages", arr);
        return res;
    }

    static final class Log {
        final FileOutputStream out;

        Log(Path p) throws IOException {
            out = new FileOutputStream(p.toFile(), true);
        }

        /** One write() per line: a SIGKILL cannot lose a line that write() returned for. */
        synchronized void line(String ev, JsonObject o) {
            JsonObject e = new JsonObject();
            e.addProperty("ev", ev);
            for (Map.Entry<String, JsonElement> x : o.entrySet()) {
                e.add(x.getKey(), x.getValue());
            }
            try {
                out.write((Json.line(e) + "\n").getBytes(StandardCharsets.UTF_8));
            } catch (IOException ex) {
                throw new RuntimeException(ex);
            }
        }
    }

    /** The child JVM of a kill-mode write: writers put until a watcher SIGKILLs this very process. */
    static void child(String version, JsonObject scen, Path out) throws Exception {
        Path storeDir = out.resolve("store");
        JsonObject end = scen.getAsJsonObject("end");
        int afterAcks = end.has("after_acks") ? end.get("after_acks").getAsInt() : 1;
        int writers = end.has("writers") ? end.get("writers").getAsInt() : 2;
        long paceMs = end.has("pace_ms") ? end.get("pace_ms").getAsLong() : 0;
        Log log = new Log(out.resolve("put-log.jsonl"));
        Map<Integer, JsonObject> done = new ConcurrentHashMap<>();
        int first = classicFirst(scen);
        if (first > 0) {
            classicPhase(scen, storeDir, first, done, new ArrayList<>(), log);
        }
        MessageStoreConfig c = Store.config(config(scen), storeDir);
        DefaultMessageStore s = Store.open(c, config(scen));
        if (!s.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed on a new store");
        }
        Viewer.holdSchedule(s);
        s.start();
        DLedger.awaitLeader(s, 60_000);
        long pid = ProcessHandle.current().pid();
        // The killer is started now and waits for one line on its stdin: when the moment comes the
        // SIGKILL lands within microseconds, instead of after a fork+exec from a busy JVM.
        Process killer = new ProcessBuilder("bash", "-c", "read -r _; kill -KILL " + pid)
            .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        java.io.OutputStream trigger = killer.getOutputStream();
        JsonArray msgs = scen.getAsJsonArray("messages");
        AtomicInteger next = new AtomicInteger(first);
        AtomicInteger acks = new AtomicInteger(done.size());
        AtomicInteger inProgress = new AtomicInteger();
        AtomicInteger finished = new AtomicInteger();
        for (int w = 0; w < writers; w++) {
            final String name = "writer-" + w;
            Thread t = new Thread(() -> {
                try {
                    for (int i; (i = next.getAndIncrement()) < msgs.size(); ) {
                        Built b = build(s, c, msgs.get(i).getAsJsonObject(), i, done, name);
                        inProgress.incrementAndGet();
                        log.line("attempt", b.info);
                        PutMessageResult pr = put(s, b);
                        JsonObject r = b.info.deepCopy();
                        if (b.inner != null) {
                            describe(r, b.inner);
                        }
                        fill(r, pr);
                        if (b.op != null && ok(pr)) {
                            putOp(s, b, r);
                        }
                        done.put(i, r);
                        log.line("ack", r);
                        inProgress.decrementAndGet();
                        acks.incrementAndGet();
                        if (paceMs > 0) {
                            Thread.sleep(paceMs);
                        }
                    }
                } catch (Throwable e) {
                    JsonObject o = new JsonObject();
                    o.addProperty("thread", name);
                    o.addProperty("error", Main.describe(e));
                    log.line("writer_error", o);
                } finally {
                    finished.incrementAndGet();
                }
            }, name);
            t.start();
        }
        while (true) {
            boolean all = finished.get() == writers;
            if ((acks.get() >= afterAcks && inProgress.get() > 0) || all) {
                JsonObject o = new JsonObject();
                o.addProperty("acks_seen", acks.get());
                o.addProperty("put_calls_in_progress", inProgress.get());
                o.addProperty("writers_finished", all);
                o.addProperty("time", System.currentTimeMillis());
                log.line("sigkill_requested", o);
                trigger.write('\n');
                trigger.flush();
                Thread.sleep(60_000);
                return;
            }
            Thread.onSpinWait();
        }
    }
}
