import java.io.*;
import java.nio.ByteBuffer;
import java.util.zip.GZIPInputStream;

/** Reads hex payloads, one per line; decompresses each as Kafka 0.7.2's CompressionUtils does
 *  (GZIPInputStream over a ByteBufferBackedInputStream whose available() is 0, read in
 *  1024-byte steps until read() returns <= 0); prints "ok <hex output>" or "error <class>". */
public class GzipCases {
    static class ByteBufferBackedInputStream extends InputStream {
        private final ByteBuffer buffer;
        ByteBufferBackedInputStream(ByteBuffer buffer) { this.buffer = buffer; }
        public int read() { return buffer.hasRemaining() ? (buffer.get() & 0xFF) : -1; }
        public int read(byte[] bytes, int off, int len) {
            if (!buffer.hasRemaining()) return -1;
            int realLen = Math.min(len, buffer.remaining());
            buffer.get(bytes, off, realLen);
            return realLen;
        }
    }

    static byte[] unhex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x & 0xff));
        return sb.toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            try {
                InputStream source = new ByteBufferBackedInputStream(ByteBuffer.wrap(unhex(line)));
                GZIPInputStream gz = new GZIPInputStream(source);
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                byte[] step = new byte[1024];
                int n;
                while ((n = gz.read(step)) > 0) out.write(step, 0, n);
                gz.close();
                System.out.println("ok " + hex(out.toByteArray()));
            } catch (IOException e) {
                System.out.println("error " + e.getClass().getSimpleName());
            }
        }
    }
}
