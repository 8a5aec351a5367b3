package org.rmqtool.oracle;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;

import java.io.IOException;
import java.io.PrintStream;
import java.io.Writer;

/** JSON output: UTF-8, no HTML escaping, nulls kept, insertion order of the objects. */
final class Json {
    private static final Gson PRETTY = new GsonBuilder().disableHtmlEscaping().serializeNulls().setPrettyPrinting().create();
    private static final Gson LINE = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();

    static synchronized void print(PrintStream out, JsonElement e) {
        out.println(PRETTY.toJson(e));
        out.flush();
    }

    static synchronized void printLine(PrintStream out, JsonElement e) {
        out.println(LINE.toJson(e));
        out.flush();
    }

    static void write(Writer w, JsonElement e, boolean pretty) throws IOException {
        w.write((pretty ? PRETTY : LINE).toJson(e));
        w.write('\n');
    }

    static String line(JsonElement e) {
        return LINE.toJson(e);
    }
}
