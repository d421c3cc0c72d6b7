package io.rayq.spark;

import java.nio.ByteBuffer;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The {@code body} column of a page whose records a task read from the commit log
 * ({@link CommitLogRuns}): row i is {@code length[i]} bytes at {@code at[i]} of the
 * buffer, copied out only when Spark asks for it. Bodies are never null.
 */
final class BodyVector extends ColumnVector {
  private final ByteBuffer data;
  private final int[] at;
  private final int[] length;

  BodyVector(ByteBuffer data, int[] at, int[] length) {
    super(DataTypes.BinaryType);
    this.data = data;
    this.at = at;
    this.length = length;
  }

  @Override
  public byte[] getBinary(int rowId) {
    byte[] body = new byte[length[rowId]];
    data.get(at[rowId], body);
    return body;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return false;
  }

  @Override
  public boolean hasNull() {
    return false;
  }

  @Override
  public int numNulls() {
    return 0;
  }

  @Override
  public void close() {}

  private static UnsupportedOperationException notBinary() {
    return new UnsupportedOperationException("rayq: body is a binary column");
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw notBinary();
  }

  @Override
  public byte getByte(int rowId) {
    throw notBinary();
  }

  @Override
  public short getShort(int rowId) {
    throw notBinary();
  }

  @Override
  public int getInt(int rowId) {
    throw notBinary();
  }

  @Override
  public long getLong(int rowId) {
    throw notBinary();
  }

  @Override
  public float getFloat(int rowId) {
    throw notBinary();
  }

  @Override
  public double getDouble(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    throw notBinary();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw notBinary();
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw notBinary();
  }
}
