import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * Kafka's command-line tools run in one JVM (issue 28): each line of stdin is one invocation,
 * {"label": ..., "main": "org.apache.kafka.tools.TopicCommand", "args": [...], "stdin": "..."},
 * run as {@code kafka-run-class.sh MAIN ARGS < STDIN} would run it: the class's own
 * {@code main(String[])}, its {@code Exit.exit}/{@code Exit.halt} trapped (Kafka's tools end
 * through {@code org.apache.kafka.common.utils.Exit}, the hook Kafka's own tool tests use) and
 * its System.out/System.err captured. One JSON line per invocation on the real stdout:
 * {"label", "exit", "stdout", "stderr"}; "exit" is the status the tool asked for (0 when its main
 * returned; 1 with "exception" for an uncaught exception, as the JVM would end). The hooks a step
 * adds with {@code Exit.addShutdownHook} run when it ends, as at a JVM's exit. (The verifiable
 * clients use System.exit and Runtime's hooks: tests/ecosystem runs them in JVMs of their own.) A tool's output
 * after its first Exit.exit is left out: the real process ends there.
 */
public final class KafkalogTools {
    /** the first exit status a step asked for, and how much it had printed then (-1: none yet) */
    private static int exitStatus;
    private static int outAtExit;
    private static int errAtExit;
    private static ByteArrayOutputStream out;
    private static ByteArrayOutputStream err;
    /** where the step's shutdown hooks began to print */
    private static int hookOut;
    private static int hookErr;

    private static byte[] seen(ByteArrayOutputStream buf, int atExit, int atHooks) {
        byte[] all = buf.toByteArray();
        if (atExit < 0) {
            return all;
        }
        byte[] kept = new byte[atExit + all.length - atHooks];
        System.arraycopy(all, 0, kept, 0, atExit);
        System.arraycopy(all, atHooks, kept, atExit, all.length - atHooks);
        return kept;
    }

    private static ToolExit exit(int status) {
        if (outAtExit < 0) {    // the real process ends here: what a tool prints after it is not seen
            exitStatus = status;
            System.out.flush();
            System.err.flush();
            outAtExit = out.size();
            errAtExit = err.size();
        }
        return new ToolExit(status);
    }

    private static final class ToolExit extends RuntimeException {
        final int status;

        ToolExit(int status) {
            super("exit " + status, null, false, false);
            this.status = status;
        }
    }

    public static void main(String[] argv) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        InputStream realIn = System.in;
        ObjectMapper json = new ObjectMapper();
        Exit.setExitProcedure((status, message) -> {
            throw exit(status);
        });
        Exit.setHaltProcedure((status, message) -> {
            throw exit(status);
        });
        // a tool's shutdown hooks (Exit.addShutdownHook: the verifiable producer closes its producer
        // and prints its summary there) run when its step ends, as they run when its JVM exits
        List<Runnable> hooks = new ArrayList<>();
        Exit.setShutdownHookAdder((name, runnable) -> hooks.add(runnable));
        BufferedReader steps = new BufferedReader(new InputStreamReader(realIn, StandardCharsets.UTF_8));
        String line;
        while ((line = steps.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode step = json.readTree(line);
            List<String> args = new ArrayList<>();
            step.get("args").forEach(a -> args.add(a.asText()));
            out = new ByteArrayOutputStream();
            err = new ByteArrayOutputStream();
            outAtExit = -1;
            errAtExit = -1;
            String stdin = step.has("stdin") ? step.get("stdin").asText() : "";
            ObjectNode result = json.createObjectNode();
            result.put("label", step.get("label").asText());
            long started = System.nanoTime();
            System.setIn(new ByteArrayInputStream(stdin.getBytes(StandardCharsets.UTF_8)));
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            try {
                Method m = Class.forName(step.get("main").asText()).getMethod("main", String[].class);
                m.invoke(null, (Object) args.toArray(new String[0]));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (!(cause instanceof ToolExit)) {
                    exit(1);
                    result.put("exception", String.valueOf(cause));
                }
            } finally {
                System.out.flush();
                System.err.flush();
                hookOut = out.size();
                hookErr = err.size();
                for (Runnable hook : hooks) {
                    try {
                        hook.run();
                    } catch (RuntimeException e) {
                        if (!(e instanceof ToolExit)) {
                            e.printStackTrace();
                        }
                    }
                }
                hooks.clear();
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
                System.setIn(realIn);
            }
            // a tool that called Exit.exit (and perhaps caught it): what it printed then, and its hooks'
            byte[] o = seen(out, outAtExit, hookOut);
            byte[] e = seen(err, errAtExit, hookErr);
            result.put("exit", outAtExit >= 0 ? exitStatus : 0);
            result.put("stdout", new String(o, StandardCharsets.UTF_8));
            result.put("stderr", new String(e, StandardCharsets.UTF_8));
            result.put("ms", (System.nanoTime() - started) / 1_000_000);
            realOut.println(json.writeValueAsString(result));
            realOut.flush();
        }
        realOut.flush();
        // a tool's leftover non-daemon thread (a producer not closed on an error path) must not
        // keep the JVM alive: every step has answered
        Runtime.getRuntime().halt(0);
    }
}
