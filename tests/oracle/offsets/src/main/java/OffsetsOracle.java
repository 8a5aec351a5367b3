import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * The broker's ConsumerOffsetManager, with its config file path pointed at a given file
 * (configFilePath is the only thing it takes from the BrokerController).
 *
 *   persist FILE COMMITS.json   commitOffset(...) for each {"group","topic","queue","offset"}
 *                               in order, then persist() (MixAll.string2File: .tmp, .bak, rename)
 *   load FILE...                for each FILE: load() (ConfigManager: FILE, else FILE.bak), print one line
 *                               {"file", "loaded": bool, "offsetTable": {"topic@group": {"q": offset}}}
 *   encode FILE                 load(), then print encode(true) exactly
 *   pull STORE CONFIG.json N    start a DefaultMessageStore on STORE (its own recovery; CONFIG:
 *                               MessageStoreConfig settings), load STORE/config/consumerOffset.json,
 *                               put N new messages into each queue an offset names, then pull one
 *                               message from each committed offset; one JSON line per offset
 */
public class OffsetsOracle {
    static ConsumerOffsetManager at(final String file) {
        return new ConsumerOffsetManager() {
            @Override
            public String configFilePath() {
                return file;
            }
        };
    }

    static void pull(String root, JSONObject conf, int n, java.io.PrintStream stdout) throws Exception {
        MessageStoreConfig msc = new MessageStoreConfig();
        msc.setStorePathRootDir(root);
        msc.setStorePathCommitLog(root + "/commitlog");
        msc.setMappedFileSizeCommitLog(conf.getIntValue("mappedFileSizeCommitLog"));
        msc.setMappedFileSizeConsumeQueue(conf.getIntValue("mappedFileSizeConsumeQueue"));
        msc.setMaxHashSlotNum(conf.getIntValue("maxHashSlotNum"));
        msc.setMaxIndexNum(conf.getIntValue("maxIndexNum"));
        msc.setCheckCRCOnRecover(conf.getBooleanValue("checkCRCOnRecover"));
        DefaultMessageStore store = new DefaultMessageStore(msc, new BrokerStatsManager("oracle", false),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { }, new BrokerConfig());
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load failed");
        }
        store.start();
        ConsumerOffsetManager com = at(root + "/config/consumerOffset.json");
        boolean loaded = com.load();
        List<Object[]> entries = new ArrayList<>();
        Map<String, Long> maxBefore = new LinkedHashMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, Long>> e : new TreeMap<>(com.getOffsetTable()).entrySet()) {
            String[] tg = e.getKey().split("@");
            for (Map.Entry<Integer, Long> q : new TreeMap<>(e.getValue()).entrySet()) {
                entries.add(new Object[] {tg[0], tg[1], q.getKey(), q.getValue()});
                maxBefore.putIfAbsent(tg[0] + "/" + q.getKey(), store.getMaxOffsetInQueue(tg[0], q.getKey()));
            }
        }
        for (String tq : maxBefore.keySet()) {
            String topic = tq.substring(0, tq.lastIndexOf('/'));
            int queue = Integer.parseInt(tq.substring(tq.lastIndexOf('/') + 1));
            for (int i = 0; i < n; i++) {
                MessageExtBrokerInner m = new MessageExtBrokerInner();
                m.setTopic(topic);
                m.setQueueId(queue);
                m.setTags("after");
                m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(m.getTags()));
                m.setBody(("after-restart " + tq + " #" + i).getBytes(StandardCharsets.UTF_8));
                m.setBornTimestamp(System.currentTimeMillis());
                m.setBornHost(new InetSocketAddress("127.0.0.1", 40000));
                m.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
                m.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
                PutMessageResult pr = store.putMessage(m);
                if (!pr.isOk()) {
                    throw new IllegalStateException("put failed: " + pr);
                }
            }
            long deadline = System.currentTimeMillis() + 30000;
            while (store.getMaxOffsetInQueue(topic, queue) < maxBefore.get(tq) + n && System.currentTimeMillis() < deadline) {
                Thread.sleep(5);
            }
        }
        for (Object[] en : entries) {
            String topic = (String) en[0];
            int queue = (Integer) en[2];
            long committed = (Long) en[3];
            GetMessageResult r = store.getMessage((String) en[1], topic, queue, committed, 1, null);
            JSONObject doc = new JSONObject(true);
            doc.put("topic", topic);
            doc.put("group", en[1]);
            doc.put("queue_id", queue);
            doc.put("committed", committed);
            doc.put("offsets_file_loaded", loaded);
            doc.put("max_offset_before", maxBefore.get(topic + "/" + queue));
            doc.put("max_offset_after", store.getMaxOffsetInQueue(topic, queue));
            doc.put("status", r.getStatus().name());
            doc.put("next_begin_offset", r.getNextBeginOffset());
            if (!r.getMessageBufferList().isEmpty()) {
                ByteBuffer bb = r.getMessageBufferList().get(0);
                MessageExt msg = MessageDecoder.decode(bb, true, false);
                doc.put("queue_offset", msg.getQueueOffset());
                doc.put("body", new String(msg.getBody(), StandardCharsets.UTF_8));
            }
            r.release();
            stdout.println(doc.toJSONString());
        }
        // the store is a throw-away copy: no shutdown (its flush and stats threads can hold the JVM)
        stdout.flush();
        Runtime.getRuntime().halt(0);
    }

    public static void main(String[] args) throws Exception {
        // the broker's loggers write to the console: keep stdout for the result
        java.io.PrintStream stdout = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        if (args.length < 2) {
            System.err.println("usage: persist FILE COMMITS.json | load FILE | encode FILE");
            System.exit(2);
        }
        String verb = args[0];
        ConsumerOffsetManager m = at(args[1]);
        if (verb.equals("persist")) {
            m.load();
            String spec = new String(Files.readAllBytes(Paths.get(args[2])), StandardCharsets.UTF_8);
            JSONArray commits = JSON.parseArray(spec);
            for (int i = 0; i < commits.size(); i++) {
                JSONObject c = commits.getJSONObject(i);
                m.commitOffset("127.0.0.1:0", c.getString("group"), c.getString("topic"), c.getIntValue("queue"), c.getLongValue("offset"));
            }
            m.persist();
        } else if (verb.equals("load")) {
            for (int a = 1; a < args.length; a++) {
                ConsumerOffsetManager each = at(args[a]);
                boolean ok = each.load();
                Map<String, Map<String, Long>> table = new TreeMap<>();
                for (Map.Entry<String, ConcurrentMap<Integer, Long>> e : each.getOffsetTable().entrySet()) {
                    Map<String, Long> qs = new TreeMap<>();
                    for (Map.Entry<Integer, Long> q : e.getValue().entrySet()) {
                        qs.put(String.valueOf(q.getKey()), q.getValue());
                    }
                    table.put(e.getKey(), qs);
                }
                JSONObject doc = new JSONObject(true);
                doc.put("file", args[a]);
                doc.put("loaded", ok);
                doc.put("offsetTable", table);
                stdout.println(doc.toJSONString());
            }
        } else if (verb.equals("pull")) {
            pull(args[1], JSON.parseObject(new String(Files.readAllBytes(Paths.get(args[2])), StandardCharsets.UTF_8)),
                Integer.parseInt(args[3]), stdout);
        } else if (verb.equals("encode")) {
            m.load();
            stdout.print(m.encode(true));
            stdout.flush();
        } else {
            System.err.println("unknown verb " + verb);
            System.exit(2);
        }
        System.exit(0);
    }
}
