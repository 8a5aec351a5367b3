import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;

/**
 * The broker's ConsumerOffsetManager, with its config file path pointed at a given file
 * (configFilePath is the only thing it takes from the BrokerController).
 *
 *   persist FILE COMMITS.json   commitOffset(...) for each {"group","topic","queue","offset"}
 *                               in order, then persist() (MixAll.string2File: .tmp, .bak, rename)
 *   load FILE...                for each FILE: load() (ConfigManager: FILE, else FILE.bak), print one line
 *                               {"file", "loaded": bool, "offsetTable": {"topic@group": {"q": offset}}}
 *   encode FILE                 load(), then print encode(true) exactly
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
