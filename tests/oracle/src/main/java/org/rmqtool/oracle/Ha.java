package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Replicas (issue 38): master and slave DefaultMessageStores of one release in this JVM, joined on
 * loopback by the store's own HA service, as RocketMQ's HA tests join them: classic HA
 * (DefaultHAService, 4.x HAService: the slave's role is SLAVE from its start and it is pointed at
 * the master with updateHaMasterAddress) and 5.x controller mode (AutoSwitchHAService, driven by
 * changeToMaster/changeToSlave with a sync state set of the master alone, no controller).
 *
 * Verbs:
 *   ha       --version V --scenario S.json --out DIR   the scenario's steps; DIR/NAME is each
 *            replica's store, DIR/snapshots/NAME a stopped replica's copy; DIR/result.json
 *   epoch    --version V --local FILE [--local-end N] [--master FILE --master-end N
 *            [--master-truncate-suffix OFF] [--master-append EPOCH:START]]
 *            the broker's own reading of epoch files (EpochFileCache.initCacheFromFile: the .bak when
 *            the file is empty or unreadable) and AutoSwitchHAClient.doTruncate's consistent point
 *   truncate --version V --offset X [--config C.json] --out DIR STORE
 *            a copy of STORE opened as a controller-mode slave, truncateFiles(X) and the epoch file's
 *            truncateSuffixByOffset(X) as the handshake does them, then a clean shutdown
 */
final class Ha {
    private Ha() {
    }

    static final Set<String> VERBS = new HashSet<>(Arrays.asList("ha", "epoch", "truncate"));

    static final String AUTOSWITCH = "org.apache.rocketmq.store.ha.autoswitch.AutoSwitchHAService";
    static final String EPOCH_CACHE = "org.apache.rocketmq.store.ha.autoswitch.EpochFileCache";

    static Map<String, String> options(String[] a) {
        Map<String, String> o = new LinkedHashMap<>();
        List<String> rest = new ArrayList<>();
        for (int i = 1; i < a.length; i++) {
            if (a[i].startsWith("--")) {
                if (i + 1 >= a.length) {
                    throw new Main.UsageError(a[i] + " needs a value");
                }
                o.put(a[i].substring(2), a[++i]);
            } else {
                rest.add(a[i]);
            }
        }
        if (rest.size() > 1) {
            throw new Main.UsageError("unexpected argument " + rest.get(1));
        }
        if (!rest.isEmpty()) {
            o.put("", rest.get(0));
        }
        return o;
    }

    static String need(Map<String, String> o, String k, String verb) {
        String v = o.get(k);
        if (v == null) {
            throw new Main.UsageError(verb + " needs --" + k);
        }
        return v;
    }

    static int run(String[] argv) throws Exception {
        Map<String, String> o = options(argv);
        String version = need(o, "version", argv[0]);
        Store.checkVersion(version);
        long timeoutMs = o.containsKey("timeout") ? (long) (Double.parseDouble(o.get("timeout")) * 1000) : 60_000;
        JsonObject r;
        switch (argv[0]) {
            case "ha": {
                JsonObject scen = Main.readJson(need(o, "scenario", "ha")).getAsJsonObject();
                Path out = Paths.get(need(o, "out", "ha"));
                r = Timeout.run(() -> scenario(version, scen, out), timeoutMs, "ha scenario");
                try (java.io.Writer w = new OutputStreamWriter(new FileOutputStream(out.resolve("result.json").toFile()),
                    StandardCharsets.UTF_8)) {
                    Json.write(w, r, true);
                }
                break;
            }
            case "epoch":
                r = epoch(o);
                break;
            case "truncate":
                r = Timeout.run(() -> truncate(o), timeoutMs, "truncate");
                break;
            default:
                throw new Main.UsageError("unknown verb " + argv[0]);
        }
        Json.print(Main.realOut, r);
        return 0;
    }

    // ------------------------------------------------------------------------------------------
    // replicas

    static final class Replica {
        String name;
        long brokerId;
        int port;
        Path root;
        JsonObject cfg;
        MessageStoreConfig config;
        DefaultMessageStore store;
        Object schedule;
        String role;
    }

    static int freePort() throws Exception {
        try (ServerSocket s = new ServerSocket(0)) {
            s.setReuseAddress(true);
            return s.getLocalPort();
        }
    }

    static JsonObject merged(JsonObject a, JsonObject b) {
        JsonObject m = new JsonObject();
        for (Map.Entry<String, JsonElement> e : a.entrySet()) {
            m.add(e.getKey(), e.getValue());
        }
        for (Map.Entry<String, JsonElement> e : b.entrySet()) {
            m.add(e.getKey(), e.getValue());
        }
        return m;
    }

    static boolean controller(JsonObject scen) {
        return scen.has("mode") && scen.get("mode").getAsString().equals("controller");
    }

    static JsonObject scenario(String version, JsonObject scen, Path out) throws Exception {
        boolean ctl = controller(scen);
        if (ctl && Store.major() < 5) {
            throw new Main.UsageError("controller mode needs RocketMQ 5.x");
        }
        JsonObject common = scen.has("config") ? scen.getAsJsonObject("config") : new JsonObject();
        JsonObject reps = scen.getAsJsonObject("replicas");
        Map<String, Replica> replicas = new LinkedHashMap<>();
        long id = 1;
        JsonObject rinfo = new JsonObject();
        for (Map.Entry<String, JsonElement> e : reps.entrySet()) {
            Replica r = new Replica();
            r.name = e.getKey();
            r.brokerId = id++;
            r.port = freePort();
            r.root = out.resolve(r.name);
            r.cfg = merged(common, e.getValue().getAsJsonObject());
            if (Files.isDirectory(r.root) && Files.list(r.root).findAny().isPresent()) {
                throw new Main.UsageError("ha: " + r.root + " exists and is not empty");
            }
            replicas.put(r.name, r);
            JsonObject ri = new JsonObject();
            ri.addProperty("broker_id", r.brokerId);
            ri.addProperty("ha_port", r.port);
            ri.addProperty("store", r.root.toString());
            rinfo.add(r.name, ri);
        }
        JsonObject res = new JsonObject();
        res.addProperty("version", version);
        res.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        res.addProperty("mode", ctl ? "controller" : "classic");
        res.add("replicas", rinfo);
        JsonArray steps = new JsonArray();
        JsonArray messages = new JsonArray();
        res.add("steps", steps);
        res.add("messages", messages);
        Map<Integer, JsonObject> done = new ConcurrentHashMap<>();
        int seq = 0;
        JsonArray todo = scen.getAsJsonArray("steps");
        try {
            for (int i = 0; i < todo.size(); i++) {
                JsonObject st = todo.get(i).getAsJsonObject();
                String what = st.get("do").getAsString();
                Replica r = st.has("replica") ? replica(replicas, st.get("replica").getAsString()) : null;
                Replica m = st.has("master") ? replica(replicas, st.get("master").getAsString()) : null;
                JsonObject so = new JsonObject();
                long t0 = System.nanoTime();
                so.addProperty("step", i);
                so.addProperty("do", what);
                switch (what) {
                    case "start":
                        start(r, st.get("role").getAsString(), ctl);
                        break;
                    case "master":
                        if (ctl) {
                            becomeMaster(r, st.get("epoch").getAsInt());
                        }
                        break;
                    case "follow":
                        follow(r, m, ctl, st.has("epoch") ? st.get("epoch").getAsInt() : 0);
                        break;
                    case "put": {
                        JsonArray msgs = st.getAsJsonArray("messages");
                        for (int k = 0; k < msgs.size(); k++) {
                            running(r);
                            Put.Built b = Put.build(r.store, r.config, msgs.get(k).getAsJsonObject(), seq, done, r.name);
                            PutMessageResult pr = Put.put(r.store, b);
                            for (int tries = 0; tries < 50 && retryable(pr); tries++) {
                                Thread.sleep(100);   // a busy page cache or a flag a service clears: as a client retries
                                pr = Put.put(r.store, b);
                            }
                            JsonObject info = b.info;
                            Put.fill(info, pr);
                            info.addProperty("acknowledged", Put.ok(pr));
                            info.addProperty("replica", r.name);
                            info.addProperty("step", i);
                            if (!Put.ok(pr)) {
                                throw new IllegalStateException("put of message " + seq + " on " + r.name + ": "
                                    + (pr == null ? "null" : pr.getPutMessageStatus()) + " (running flags "
                                    + flags(r.store) + ")");
                            }
                            done.put(seq, info);
                            messages.add(info);
                            seq++;
                        }
                        break;
                    }
                    case "sync":
                        sync(r, m, st.has("timeout_ms") ? st.get("timeout_ms").getAsLong() : 30_000);
                        break;
                    case "stop":
                        stop(r);
                        break;
                    case "snapshot": {
                        if (r.store != null) {
                            throw new Main.UsageError("snapshot of " + r.name + ": stop it first");
                        }
                        Path to = out.resolve("snapshots").resolve(st.get("name").getAsString());
                        Files.createDirectories(to);
                        Viewer.copyTree(r.root, to);
                        so.addProperty("snapshot", to.toString());
                        break;
                    }
                    case "state":
                        break;
                    case "wait":
                        Thread.sleep(st.get("ms").getAsLong());
                        break;
                    default:
                        throw new Main.UsageError("unknown step " + what);
                }
                if (st.has("name")) {
                    so.add("name", st.get("name"));
                }
                JsonObject states = new JsonObject();
                for (Replica x : replicas.values()) {
                    states.add(x.name, state(x, ctl));
                }
                so.add("replicas", states);
                so.addProperty("elapsed_ms", (System.nanoTime() - t0) / 1_000_000);
                steps.add(so);
            }
        } finally {
            for (Replica x : replicas.values()) {
                if (x.store != null) {
                    stop(x);
                }
            }
        }
        return res;
    }

    static boolean retryable(PutMessageResult pr) {
        String st = pr == null || pr.getPutMessageStatus() == null ? "" : pr.getPutMessageStatus().name();
        return st.equals("OS_PAGECACHE_BUSY") || st.equals("SERVICE_NOT_AVAILABLE");
    }

    static String flags(DefaultMessageStore s) {
        try {
            Object rf = Store.call(s, "getRunningFlags");
            return String.valueOf(Store.call(rf, "getFlagBits"));
        } catch (Exception e) {
            return "?";
        }
    }

    static Replica replica(Map<String, Replica> rs, String name) {
        Replica r = rs.get(name);
        if (r == null) {
            throw new Main.UsageError("no replica " + name);
        }
        return r;
    }

    static void running(Replica r) {
        if (r.store == null) {
            throw new Main.UsageError("replica " + r.name + " is not started");
        }
    }

    static void start(Replica r, String role, boolean ctl) throws Exception {
        if (r.store != null) {
            throw new Main.UsageError("replica " + r.name + " is already started");
        }
        JsonObject c = merged(r.cfg, new JsonObject());
        c.addProperty("brokerRole", role.equals("slave") ? "SLAVE" : "ASYNC_MASTER");
        if (!c.has("haSendHeartbeatInterval")) {
            // the slave reports its offset (and the master starts sending) at this interval (5 s by
            // default): only the test's time changes, not what is stored
            c.addProperty("haSendHeartbeatInterval", 100);
        }
        MessageStoreConfig mc = Store.config(c, r.root);
        mc.setHaListenPort(r.port);
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        Store.trySet(bc, "brokerId", r.brokerId);
        if (ctl) {
            Store.trySet(bc, "enableControllerMode", true);
        }
        DefaultMessageStore s = Store.open(mc, bc);
        if (!s.load()) {
            throw new IllegalStateException("load() of replica " + r.name + " failed");
        }
        r.schedule = Viewer.holdSchedule(s);
        s.start();
        r.store = s;
        r.config = mc;
        r.role = role;
        if (ctl) {
            Object ha = s.getHaService();
            Method lb = Store.method(ha.getClass(), "setLocalBrokerId", 1);
            if (lb != null) {
                lb.invoke(ha, r.brokerId);
            } else {
                Store.call(ha, "setLocalAddress", localAddress(r));
            }
        }
    }

    static String localAddress(Replica r) {
        return "127.0.0.1:" + (18000 + r.brokerId);
    }

    /** changeToMaster(epoch) with the sync state set of this replica alone (so its confirm offset is its max). */
    static void becomeMaster(Replica r, int epoch) throws Exception {
        running(r);
        Object ha = r.store.getHaService();
        Store.set(r.config, "brokerRole", new com.google.gson.JsonPrimitive("ASYNC_MASTER"));
        r.role = "master";
        Set<Object> self = new HashSet<>();
        self.add(Store.method(ha.getClass(), "setLocalBrokerId", 1) != null ? (Object) r.brokerId : localAddress(r));
        Store.call(ha, "setSyncStateSet", self);
        Object ok = Store.call(ha, "changeToMaster", epoch);
        if (!Boolean.TRUE.equals(ok)) {
            throw new IllegalStateException("changeToMaster(" + epoch + ") of " + r.name + " returned " + ok);
        }
    }

    static void follow(Replica r, Replica m, boolean ctl, int epoch) throws Exception {
        running(r);
        String addr = "127.0.0.1:" + m.port;
        if (ctl) {
            Object ha = r.store.getHaService();
            Store.set(r.config, "brokerRole", new com.google.gson.JsonPrimitive("SLAVE"));
            r.role = "slave";
            Method cs = Store.method(ha.getClass(), "changeToSlave", 3);
            Object ok = cs.invoke(ha, "", epoch, r.brokerId);
            if (!Boolean.TRUE.equals(ok)) {
                throw new IllegalStateException("changeToSlave(" + epoch + ") of " + r.name + " returned " + ok);
            }
            Store.call(ha, "updateHaMasterAddress", addr);
        } else {
            if (!"slave".equals(r.role)) {
                throw new Main.UsageError("classic HA: " + r.name + " must be started as a slave to follow");
            }
            r.store.updateHaMasterAddress(addr);
        }
        wakeClient(r.store);
    }

    /** The HA client sleeps 5 s between attempts to connect (none while it has no master address): wake it. */
    static void wakeClient(DefaultMessageStore s) {
        try {
            if (Store.method(s.getClass(), "wakeupHAClient", 0) != null) {
                Object ha = s.getHaService();
                Object client = Store.call(ha, "getHAClient");
                if (client != null) {
                    Store.call(client, "wakeup");
                }
                return;
            }
            Field hs = DefaultMessageStore.class.getDeclaredField("haService");
            hs.setAccessible(true);
            Object ha = hs.get(s);
            Field hc = ha.getClass().getDeclaredField("haClient");
            hc.setAccessible(true);
            Object client = hc.get(ha);
            if (client != null) {
                Store.call(client, "wakeup");
            }
        } catch (Exception e) {
            // only time is lost: the client connects at its next attempt
        }
    }

    static void sync(Replica r, Replica m, long timeoutMs) throws Exception {
        running(r);
        running(m);
        long end = System.currentTimeMillis() + timeoutMs;
        while (true) {
            long want = m.store.getMaxPhyOffset();
            if (r.store.getMaxPhyOffset() == want && r.store.dispatchBehindBytes() <= 0
                && m.store.dispatchBehindBytes() <= 0) {
                return;
            }
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("sync: " + r.name + " at " + r.store.getMaxPhyOffset() + ", "
                    + m.name + " at " + want + " after " + timeoutMs + " ms");
            }
            Thread.sleep(10);
        }
    }

    static void stop(Replica r) throws Exception {
        running(r);
        Store.waitReput(r.store, 10_000);
        Viewer.persistSchedule(r.schedule);
        DefaultMessageStore s = r.store;
        QuickShutdown.run(s::shutdown);
        r.store = null;
        r.schedule = null;
    }

    static JsonObject state(Replica r, boolean ctl) throws Exception {
        JsonObject o = new JsonObject();
        o.addProperty("running", r.store != null);
        if (r.store == null) {
            return o;
        }
        o.addProperty("role", r.role);
        o.addProperty("min_phy_offset", r.store.getMinPhyOffset());
        o.addProperty("max_phy_offset", r.store.getMaxPhyOffset());
        Method co = Store.method(r.store.getClass(), "getConfirmOffset", 0);
        if (co != null) {
            o.addProperty("confirm_offset", (Long) co.invoke(r.store));
        }
        if (ctl) {
            o.add("epoch_entries", entries((List<?>) Store.call(r.store.getHaService(), "getEpochEntries")));
        }
        return o;
    }

    // ------------------------------------------------------------------------------------------
    // epoch files

    static JsonArray entries(List<?> es) throws Exception {
        JsonArray a = new JsonArray();
        for (Object e : es) {
            JsonArray x = new JsonArray();
            x.add((Integer) Store.call(e, "getEpoch"));
            x.add((Long) Store.call(e, "getStartOffset"));
            x.add((Long) Store.call(e, "getEndOffset"));
            a.add(x);
        }
        return a;
    }

    static Class<?> entryClass() throws ClassNotFoundException {
        try {
            return Class.forName("org.apache.rocketmq.remoting.protocol.EpochEntry");
        } catch (ClassNotFoundException e) {
            return Class.forName("org.apache.rocketmq.common.EpochEntry");
        }
    }

    static Object newEntry(int epoch, long start) throws Exception {
        Constructor<?> k = entryClass().getConstructor(int.class, long.class);
        return k.newInstance(epoch, start);
    }

    /** The broker's read of an epoch file (EpochFileCache(path).initCacheFromFile()) and a cache in memory of its entries. */
    static Object readCache(String path, JsonObject out, String side) throws Exception {
        Class<?> c = Class.forName(EPOCH_CACHE);
        Object file = c.getConstructor(String.class).newInstance(path);
        Object ok;
        try {
            ok = Store.call(file, "initCacheFromFile");
        } catch (java.lang.reflect.InvocationTargetException e) {
            Throwable t = e.getCause();
            out.addProperty(side + "_error", t.getClass().getName() + ": " + t.getMessage());
            return null;
        }
        out.addProperty(side + "_read_ok", (Boolean) ok);
        List<?> es = (List<?>) Store.call(file, "getAllEntries");
        out.add(side + "_file_entries", entries(es));
        // as AutoSwitchHAClient.doTruncate: a cache in memory (no file) from the entries
        Object mem = c.getConstructor().newInstance();
        Store.call(mem, "initCacheFromEntries", es);
        return mem;
    }

    static JsonObject epoch(Map<String, String> o) throws Exception {
        JsonObject r = new JsonObject();
        Object local = readCache(need(o, "local", "epoch"), r, "local");
        if (local != null && o.containsKey("local-end")) {
            Store.call(local, "setLastEpochEntryEndOffset", Long.parseLong(o.get("local-end")));
        }
        if (local != null) {
            r.add("local_entries", entries((List<?>) Store.call(local, "getAllEntries")));
        }
        if (!o.containsKey("master")) {
            return r;
        }
        Object master = readCache(o.get("master"), r, "master");
        if (master == null || local == null) {
            return r;
        }
        // what the new master's changeToMaster does to its cache before the handshake sends it
        if (o.containsKey("master-truncate-suffix")) {
            Store.call(master, "truncateSuffixByOffset", Long.parseLong(o.get("master-truncate-suffix")));
        }
        if (o.containsKey("master-append")) {
            String[] es = o.get("master-append").split(":");
            Object e = newEntry(Integer.parseInt(es[0]), Long.parseLong(es[1]));
            Object lastEpoch = Store.call(master, "lastEpoch");
            if ((Integer) lastEpoch >= Integer.parseInt(es[0])) {
                Store.call(master, "truncateSuffixByEpoch", Integer.parseInt(es[0]));
            }
            r.addProperty("master_append_ok", (Boolean) Store.call(master, "appendEntry", e));
        }
        // the handshake: the master's entries as sent, its last entry ending at its max offset
        List<?> sent = (List<?>) Store.call(master, "getAllEntries");
        Class<?> c = Class.forName(EPOCH_CACHE);
        Object m2 = c.getConstructor().newInstance();
        Store.call(m2, "initCacheFromEntries", sent);
        Store.call(m2, "setLastEpochEntryEndOffset", Long.parseLong(need(o, "master-end", "epoch")));
        r.add("master_entries", entries((List<?>) Store.call(m2, "getAllEntries")));
        r.addProperty("consistent_point", (Long) Store.call(local, "findConsistentPoint", m2));
        return r;
    }

    // ------------------------------------------------------------------------------------------
    // truncateFiles on a copy

    /** Whether the release on the class path is at least major.minor. */
    static boolean atLeast(int major, int minor) {
        String v = System.getProperty("oracle.rocketmq.version", "");
        String[] p = v.split("\\.");
        try {
            int a = Integer.parseInt(p[0]);
            int b = p.length > 1 ? Integer.parseInt(p[1]) : 0;
            return a > major || (a == major && b >= minor);
        } catch (NumberFormatException e) {
            throw new IllegalStateException("no oracle.rocketmq.version: " + v);
        }
    }

    static JsonObject truncate(Map<String, String> o) throws Exception {
        Path store = Paths.get(need(o, "", "truncate"));
        Path out = Paths.get(need(o, "out", "truncate"));
        long offset = Long.parseLong(need(o, "offset", "truncate"));
        if (Files.exists(out) && Files.list(out).findAny().isPresent()) {
            throw new Main.UsageError("truncate: " + out + " exists and is not empty");
        }
        Files.createDirectories(out);
        Viewer.copyTree(store, out);
        JsonObject cfg = o.containsKey("config") ? Main.readJson(o.get("config")).getAsJsonObject() : new JsonObject();
        JsonObject c = merged(cfg, new JsonObject());
        c.addProperty("brokerRole", "SLAVE");
        MessageStoreConfig mc = Store.config(c, out);
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        boolean ctl = Store.major() >= 5 && Files.exists(out.resolve("epochFileCheckpoint"));
        if (ctl) {
            Store.trySet(bc, "enableControllerMode", true);
        }
        DefaultMessageStore s = Store.open(mc, bc);
        if (!s.load()) {
            throw new IllegalStateException("load() failed");
        }
        Object sched = Viewer.holdSchedule(s);
        s.start();
        Store.waitReput(s, 10_000);
        JsonObject r = new JsonObject();
        r.addProperty("controller_mode", ctl);
        r.addProperty("max_phy_offset_before", s.getMaxPhyOffset());
        r.addProperty("truncated", (Boolean) Store.call(s, "truncateFiles", offset));
        if (ctl) {
            // doTruncate then cuts the epoch file (5.0.0-5.3.3 always; 5.4.0+ only when the point is
            // below the max offset it reads after truncateFiles)
            boolean cut = !atLeast(5, 4) || offset < s.getMaxPhyOffset();
            r.addProperty("epoch_file_cut", cut);
            if (cut) {
                Store.call(s.getHaService(), "truncateEpochFileSuffix", offset);
            }
            r.add("epoch_entries", entries((List<?>) Store.call(s.getHaService(), "getEpochEntries")));
        }
        r.addProperty("max_phy_offset_after", s.getMaxPhyOffset());
        Viewer.persistSchedule(sched);
        QuickShutdown.run(s::shutdown);
        JsonObject files = new JsonObject();
        for (String rel : Viewer.listFiles(out)) {
            if (rel.equals("lock")) {
                continue;
            }
            JsonObject f = new JsonObject();
            Path p = out.resolve(rel);
            f.addProperty("size", Files.size(p));
            f.addProperty("sha256", Viewer.sha256(p, Long.MAX_VALUE));
            files.add(rel, f);
        }
        r.add("files", files);
        return r;
    }
}
