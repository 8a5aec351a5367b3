import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.config.v1.RocksDBConsumerOffsetManager;
import org.apache.rocketmq.broker.config.v2.ConfigStorage;
import org.apache.rocketmq.broker.config.v2.ConsumerOffsetManagerV2;
import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * write v1|v2 STORE COMMITS.json: commitOffset(...) for each {"group","topic","queue","offset"}
 * through the 5.3.3 RocksDB offset manager (v1: RocksDBConsumerOffsetManager,
 * STORE/config/consumerOffsets; v2: ConsumerOffsetManagerV2, STORE/config/rdb), persist,
 * stop cleanly.
 */
public class RocksOffsetsOracle {
    public static void main(String[] args) throws Exception {
        java.io.PrintStream out = System.out;
        System.setOut(System.err);  // the broker's loggers write to the console
        String kind = args[0];
        MessageStoreConfig msc = new MessageStoreConfig();
        msc.setStorePathRootDir(args[1]);
        BrokerController bc = new BrokerController(new BrokerConfig(), new NettyServerConfig(), new NettyClientConfig(), msc);
        JSONArray commits = JSON.parseArray(new String(Files.readAllBytes(Paths.get(args[2])), StandardCharsets.UTF_8));
        ConsumerOffsetManager m;
        ConfigStorage cs = null;
        if (kind.equals("v1")) {
            m = new RocksDBConsumerOffsetManager(bc);
        } else {
            cs = new ConfigStorage(msc);
            cs.start();
            m = new ConsumerOffsetManagerV2(bc, cs);
        }
        if (!m.load()) {
            throw new IllegalStateException("load failed");
        }
        for (int i = 0; i < commits.size(); i++) {
            JSONObject c = commits.getJSONObject(i);
            m.commitOffset("127.0.0.1:0", c.getString("group"), c.getString("topic"), c.getIntValue("queue"), c.getLongValue("offset"));
        }
        m.persist();
        m.stop();
        if (cs != null) {
            cs.shutdown();
        }
        // The databases are closed and durable here. RocksDB's native teardown at process
        // exit can still abort ("pthread lock: Invalid argument", SIGABRT) when one of its
        // background threads outlives the static destructors; the caller judges the run by
        // this line, not by the exit status.
        out.println("PERSISTED");
        out.flush();
        System.exit(0);
    }
}
