package io.rayq.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * A task's reads of a broker's commit-log files, for pages whose bodies were left there
 * (actors/server/columnar.py {@code refs_page}): the page's runs of records are read
 * back to back into one buffer (reused page after page), and every record the page names
 * is checked as the broker checks it (size, magic, CRC-32C of bytes [44, size) then
 * [12, 44): store/codec.py) before its body is handed to Spark. A file that is gone, a
 * short read or a record that fails its check makes {@link #load} answer null: the
 * caller asks for the page with its bodies instead.
 */
final class CommitLogRuns implements AutoCloseable {
  static final int MAGIC = 0x52415951;
  private static final int FIXED_SIZE = 91;
  private static final int HEADER_SIZE = 88;
  private static final int BODY_LENGTH_AT = 84;
  private static final int CRC_START = 44;
  private static final int STORE_BLOCK_AT = 12;

  private final Map<Path, FileChannel> files = new HashMap<>();
  private final CRC32C crc = new CRC32C();
  private ByteBuffer buffer = ByteBuffer.allocateDirect(0);

  /**
   * The bodies of the records at {@code recordAt} in the runs ({@code "offset:length,..."}
   * in the commit log under {@code dir}), or null when they cannot be read as checked.
   */
  BodyVector load(String dir, long segmentSize, String runs, int[] recordAt)
      throws IOException {
    if (!read(dir, segmentSize, runs)) {
      return null;
    }
    ByteBuffer data = buffer;
    ByteBuffer view = data.duplicate();
    int limit = data.limit();
    int[] at = new int[recordAt.length];
    int[] length = new int[recordAt.length];
    for (int i = 0; i < recordAt.length; i++) {
      int p = recordAt[i];
      if (p < 0 || (long) p + FIXED_SIZE > limit) {
        return null;
      }
      int size = data.getInt(p);
      if (size < FIXED_SIZE || (long) p + size > limit || data.getInt(p + 4) != MAGIC) {
        return null;
      }
      int bodyLength = data.getInt(p + BODY_LENGTH_AT);
      if (bodyLength < 0 || bodyLength > size - FIXED_SIZE) {
        return null;
      }
      crc.reset();
      view.limit(p + size).position(p + CRC_START);
      crc.update(view);
      view.limit(p + CRC_START).position(p + STORE_BLOCK_AT);
      crc.update(view);
      if ((int) crc.getValue() != data.getInt(p + 8)) {
        return null;
      }
      at[i] = p + HEADER_SIZE;
      length[i] = bodyLength;
    }
    return new BodyVector(data, at, length);
  }

  /** Reads the runs back to back into {@code buffer}; false when a file is gone or short. */
  private boolean read(String dir, long segmentSize, String runs) throws IOException {
    String[] parts = runs.isEmpty() ? new String[0] : runs.split(",");
    long[] starts = new long[parts.length];
    int[] lengths = new int[parts.length];
    long total = 0;
    for (int i = 0; i < parts.length; i++) {
      int colon = parts[i].indexOf(':');
      starts[i] = Long.parseLong(parts[i], 0, colon, 10);
      lengths[i] = Integer.parseInt(parts[i], colon + 1, parts[i].length(), 10);
      total += lengths[i];
    }
    if (total > Integer.MAX_VALUE) {
      throw new IllegalStateException("rayq: a page of " + total + " bytes of records");
    }
    if (buffer.capacity() < total) {
      buffer = ByteBuffer.allocateDirect((int) Math.min(Integer.MAX_VALUE,
          Math.max(total, 2L * buffer.capacity())));
    }
    buffer.clear();
    for (int i = 0; i < starts.length; i++) {
      long segment = starts[i] - starts[i] % segmentSize;
      FileChannel file = file(Path.of(dir, String.format("%020d", segment)));
      if (file == null) {
        return false;
      }
      long position = starts[i] - segment;
      buffer.limit(buffer.position() + lengths[i]);
      while (buffer.hasRemaining()) {
        int n = file.read(buffer, position);
        if (n < 0) {
          return false;
        }
        position += n;
      }
    }
    buffer.flip();
    return true;
  }

  private FileChannel file(Path path) throws IOException {
    FileChannel file = files.get(path);
    if (file == null) {
      try {
        file = FileChannel.open(path, StandardOpenOption.READ);
      } catch (NoSuchFileException e) {
        return null;
      }
      files.put(path, file);
    }
    return file;
  }

  @Override
  public void close() throws IOException {
    for (FileChannel file : files.values()) {
      file.close();
    }
    files.clear();
  }
}
