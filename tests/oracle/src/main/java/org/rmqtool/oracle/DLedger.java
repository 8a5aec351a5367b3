package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.MemberState;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.store.DLedgerStore;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * DLedger commitlogs (enableDLegerCommitLog=true): a single-member DLedger group on a free loopback
 * port per store, as RocketMQ's own DLedger tests set one up (group, selfId n0, peers
 * "n0-127.0.0.1:PORT"); waiting for the member to lead and to commit what it holds; and what the
 * view adds about the DLedger store (its checkpoint and currterm files, its ledger indexes, its entries).
 */
final class DLedger {
    private DLedger() {
    }

    static final String DEFAULT_GROUP = "rmqtool";
    static final String DEFAULT_SELF_ID = "n0";

    static boolean on(MessageStoreConfig c) {
        try {
            Object v = Store.call(c, "isEnableDLegerCommitLog");
            return Boolean.TRUE.equals(v);
        } catch (Exception e) {
            return false;
        }
    }

    /** Group, selfId and peers where the caller gave none: one member on a free loopback port. */
    static void configure(MessageStoreConfig c, JsonObject cfg) {
        if (!on(c)) {
            return;
        }
        if (!cfg.has("dLegerGroup")) {
            Store.trySet(c, "dLegerGroup", DEFAULT_GROUP);
        }
        String self = cfg.has("dLegerSelfId") ? cfg.get("dLegerSelfId").getAsString() : DEFAULT_SELF_ID;
        if (!cfg.has("dLegerSelfId")) {
            Store.trySet(c, "dLegerSelfId", self);
        }
        if (!cfg.has("dLegerPeers")) {
            Store.trySet(c, "dLegerPeers", self + "-127.0.0.1:" + freePort());
        }
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            s.setReuseAddress(true);
            return s.getLocalPort();
        } catch (IOException e) {
            throw new RuntimeException("no free loopback port for the DLedger member: " + e, e);
        }
    }

    static DLedgerCommitLog log(DefaultMessageStore s) {
        CommitLog cl = s.getCommitLog();
        return cl instanceof DLedgerCommitLog ? (DLedgerCommitLog) cl : null;
    }

    static DLedgerMmapFileStore fileStore(DLedgerCommitLog d) {
        DLedgerStore st = d.getdLedgerServer().getdLedgerStore();
        return (DLedgerMmapFileStore) st;
    }

    /** After start(): wait until the single member leads (it elects itself: a new term). */
    static void awaitLeader(DefaultMessageStore s, long timeoutMs) throws InterruptedException {
        DLedgerCommitLog d = log(s);
        if (d == null) {
            return;
        }
        MemberState ms = d.getdLedgerServer().getMemberState();
        long end = System.currentTimeMillis() + timeoutMs;
        while (!ms.isLeader()) {
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("the DLedger member did not become leader within " + timeoutMs + " ms");
            }
            Thread.sleep(5);
        }
    }

    /**
     * Wait until the leader committed every entry it holds (its QuorumAckChecker raises the
     * committed index to the ledger's end about a second after it leads: a single member is its own
     * quorum), its committed position included. Returns whether it did.
     */
    static boolean awaitCommitted(DefaultMessageStore s, long timeoutMs) throws InterruptedException {
        DLedgerCommitLog d = log(s);
        if (d == null) {
            return true;
        }
        DLedgerMmapFileStore st = fileStore(d);
        long end = System.currentTimeMillis() + timeoutMs;
        while (!committed(st)) {
            if (System.currentTimeMillis() > end) {
                return false;
            }
            Thread.sleep(5);
        }
        return true;
    }

    /**
     * Whether both the committed index and the committed position reached the ledger's end.
     * DLedgerMmapFileStore.updateCommittedIndex (every release 0.1 to 0.3.3.4) sets the index
     * first and the position after it, two plain fields: waiting on the index alone may end in
     * between, and DLedgerCommitLog.getMaxOffset, finding no committed position yet, then answers
     * the data's first offset (soak case 39074, 5.0.0, the DLedger checkpoint removed).
     */
    static boolean committed(DLedgerMmapFileStore st) {
        long endIndex = st.getLedgerEndIndex();
        if (st.getCommittedIndex() < endIndex) {
            return false;
        }
        if (endIndex < 0) {
            return true;
        }
        long endPos;
        try {
            DLedgerEntry e = st.get(endIndex);
            endPos = e.getPos() + e.getSize();
        } catch (Throwable t) {
            endPos = st.getDataFileList().getMaxWrotePosition();
        }
        return st.getCommittedPos() >= endPos;
    }

    /** The DLedger store's state as the broker holds it now. */
    static JsonObject state(DefaultMessageStore s) {
        DLedgerCommitLog d = log(s);
        if (d == null) {
            return null;
        }
        DLedgerServer server = d.getdLedgerServer();
        DLedgerMmapFileStore st = fileStore(d);
        JsonObject o = new JsonObject();
        MemberState ms = server.getMemberState();
        o.addProperty("role", String.valueOf(ms.getRole()));
        o.addProperty("current_term", ms.currTerm());
        o.addProperty("ledger_begin_index", st.getLedgerBeginIndex());
        o.addProperty("ledger_end_index", st.getLedgerEndIndex());
        o.addProperty("ledger_end_term", st.getLedgerEndTerm());
        o.addProperty("committed_index", st.getCommittedIndex());
        o.addProperty("committed_pos", st.getCommittedPos());
        o.addProperty("data_min_offset", st.getDataFileList().getMinOffset());
        o.addProperty("data_max_wrote_position", st.getDataFileList().getMaxWrotePosition());
        o.addProperty("index_max_wrote_position", st.getIndexFileList().getMaxWrotePosition());
        o.addProperty("divided_commitlog_offset", d.getDividedCommitlogOffset());
        o.addProperty("data_file_count", st.getDataFileList().getMappedFiles().size());
        o.addProperty("index_file_count", st.getIndexFileList().getMappedFiles().size());
        return o;
    }

    /** Every entry of the ledger from its begin to its end index, as DLedgerMmapFileStore.get reads it (header only). */
    static JsonArray entries(DefaultMessageStore s) {
        DLedgerCommitLog d = log(s);
        if (d == null) {
            return null;
        }
        DLedgerMmapFileStore st = fileStore(d);
        JsonArray out = new JsonArray();
        long begin = st.getLedgerBeginIndex();
        long end = st.getLedgerEndIndex();
        for (long i = Math.max(begin, 0); begin >= 0 && i <= end; i++) {
            JsonObject o = new JsonObject();
            try {
                DLedgerEntry e = st.get(i);
                o.addProperty("index", e.getIndex());
                o.addProperty("term", e.getTerm());
                o.addProperty("pos", e.getPos());
                o.addProperty("size", e.getSize());
                o.addProperty("magic", e.getMagic());
                o.addProperty("channel", e.getChannel());
                o.addProperty("chain_crc", e.getChainCrc());
                o.addProperty("body_crc", e.getBodyCrc());
                o.addProperty("body_len", e.getBody() == null ? -1 : e.getBody().length);
            } catch (Throwable t) {
                o.addProperty("index", i);
                o.addProperty("error", Main.describe(t));
            }
            out.add(o);
        }
        return out;
    }

    /** The entry header in front of a message the DLedger commitlog hands out (bb at the entry). */
    static JsonObject header(ByteBuffer bb, int pos, long entryOffset) {
        JsonObject o = new JsonObject();
        o.addProperty("offset", entryOffset);
        o.addProperty("magic", bb.getInt(pos));
        o.addProperty("size", bb.getInt(pos + 4));
        o.addProperty("index", bb.getLong(pos + 8));
        o.addProperty("term", bb.getLong(pos + 16));
        o.addProperty("pos", bb.getLong(pos + 24));
        o.addProperty("channel", bb.getInt(pos + 32));
        o.addProperty("chain_crc", bb.getInt(pos + 36));
        o.addProperty("body_crc", bb.getInt(pos + 40));
        o.addProperty("body_len", bb.getInt(pos + 44));
        return o;
    }

    /** The text of the DLedger group's small files (checkpoint, currterm and their .bak) under root. */
    static JsonObject smallFiles(Path root) throws IOException {
        JsonObject o = new JsonObject();
        List<Path> dirs;
        try (Stream<Path> st = Files.list(root)) {
            dirs = st.filter(Files::isDirectory).sorted().collect(Collectors.toList());
        }
        for (Path dir : dirs) {
            for (String name : new String[] {"checkpoint", "checkpoint.bak", "currterm", "currterm.bak"}) {
                Path p = dir.resolve(name);
                if (Files.isRegularFile(p) && Files.size(p) < 4096) {
                    o.addProperty(root.relativize(p).toString(), new String(Files.readAllBytes(p), StandardCharsets.ISO_8859_1));
                }
            }
        }
        return o;
    }

    /** A config without DLedger (the classic phase of a mixed store). */
    static JsonObject classic(JsonObject cfg) {
        JsonObject c = new JsonObject();
        for (java.util.Map.Entry<String, JsonElement> e : cfg.entrySet()) {
            if (!e.getKey().startsWith("dLeger") && !e.getKey().equals("enableDLegerCommitLog")) {
                c.add(e.getKey(), e.getValue());
            }
        }
        return c;
    }

    /**
     * DLedgerMmapFileStore calls System.exit(-1) where a file has the wrong size (load) and where
     * its recovery ends more than a file before the last data file: a broker process ends there.
     * The view turns that exit into an exception inside load() (the broker's load() then returns
     * false) and records that the broker would have exited. Main's own halt() is let through.
     */
    static final class ExitGuard extends SecurityManager {
        static volatile Integer requested;
        static volatile boolean allow;

        @Override
        public void checkExit(int status) {
            if (allow) {
                return;
            }
            requested = status;
            throw new SecurityException("System.exit(" + status + ") called by the broker");
        }

        @Override
        public void checkPermission(java.security.Permission perm) {
        }

        @Override
        public void checkPermission(java.security.Permission perm, Object context) {
        }
    }

    @SuppressWarnings("removal")
    static void guardExit() {
        ExitGuard.requested = null;
        if (!(System.getSecurityManager() instanceof ExitGuard)) {
            System.setSecurityManager(new ExitGuard());
        }
    }
}
