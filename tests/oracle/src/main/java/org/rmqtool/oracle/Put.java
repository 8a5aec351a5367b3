package org.rmqtool.oracle;

import com.google.gson.JsonObject;

import java.nio.file.Path;

final class Put {
    static JsonObject write(String version, JsonObject scen, Path out, long timeoutMs) throws Exception {
        throw new Main.UsageError("write: not yet");
    }

    static void child(String version, JsonObject scen, Path out) throws Exception {
        throw new Main.UsageError("write: not yet");
    }
}
