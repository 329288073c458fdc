// DuckDB side of the rollout-file interop test (tests/rollout/duckdb_interop_test.cpp): DuckDB is
// the independent Parquet implementation our reader and writer are checked against.
//
//   node tests/interop/duckdb_rollouts.js read FILE
//     Reads a rollout file with DuckDB; prints {"columns": [{"name", "type"}], "rows": [...],
//     "kv": [{"key", "value"}], "row_groups": N}.
//   node tests/interop/duckdb_rollouts.js write DIR
//     Has DuckDB write rollout files with the schema of specs/rollout-format.md into DIR:
//     zstd.parquet, uncompressed.parquet, snappy.parquet (DuckDB's default codec), v2.parquet
//     (PARQUET_VERSION v2), nulls.parquet (a NULL task_id) with the same 10 rows, and
//     many.parquet with 5000 rows in row groups of 2048; prints {"rows": [...], "many": [...]},
//     the rows they hold (nulls.parquet: with row 3's task_id NULL).
//
// In "rows", seed is a string (BIGINT) and proof is hex.
'use strict';

const path = require('path');
const { DuckDBInstance } = require('@duckdb/node-api');

function sqlString(s) {
  return "'" + s.replace(/'/g, "''") + "'";
}

// Row values as JSON-safe objects, in column order.
const ROW_SELECT = `run_id, node_address, step, submission, task_id, group_index, prompt_tokens,
  completion_tokens, completion_logprobs, token_versions, seed::VARCHAR AS seed, temperature,
  finish_reason, reward, task_reward, length_penalty, target_length, advantage,
  hex(proof) AS proof`;

async function read(conn, file) {
  const f = sqlString(file);
  const describe = await conn.runAndReadAll(`DESCRIBE SELECT * FROM read_parquet(${f})`);
  const columns = describe
    .getRowObjectsJson()
    .map((r) => ({ name: r.column_name, type: r.column_type }));
  const rows = (await conn.runAndReadAll(`SELECT ${ROW_SELECT} FROM read_parquet(${f})`))
    .getRowObjectsJson();
  const kv = (
    await conn.runAndReadAll(
      `SELECT decode(key) AS key, decode(value) AS value FROM parquet_kv_metadata(${f})`)
  ).getRowObjectsJson();
  const meta = (await conn.runAndReadAll(
    `SELECT num_row_groups FROM parquet_file_metadata(${f})`)).getRowObjectsJson();
  return { columns, rows, kv, row_groups: Number(meta[0].num_row_groups) };
}

// n rows covering empty lists, both finish reasons, proofs of 0/1/2 chunks, non-ASCII text.
const table = (n) => `
  SELECT
    'run-' || (i % 2) AS run_id,
    'ab12cd34' AS node_address,
    (7 + i % 3)::INTEGER AS step,
    (i % 2)::INTEGER AS submission,
    'task-' || i || CASE WHEN i % 4 = 0 THEN '-été' ELSE '' END AS task_id,
    (i // 4)::INTEGER AS group_index,
    CASE WHEN i % 5 = 0 THEN []::INTEGER[]
         ELSE list_transform(range(3 + i % 7), t -> (1000 * i + t)::INTEGER) END AS prompt_tokens,
    CASE WHEN i % 5 = 1 THEN []::INTEGER[]
         ELSE list_transform(range(1 + (i * 13) % 40), t -> (t * 31 + i)::INTEGER) END
      AS completion_tokens,
    CASE WHEN i % 5 = 1 THEN []::FLOAT[]
         ELSE list_transform(range(1 + (i * 13) % 40), t -> (-0.015625 * (t + i))::FLOAT) END
      AS completion_logprobs,
    CASE WHEN i % 5 = 1 THEN []::INTEGER[]
         ELSE list_transform(range(1 + (i * 13) % 40), t -> (7 + i % 3)::INTEGER) END
      AS token_versions,
    ((1::BIGINT << 40) + i * 1000003)::BIGINT AS seed,
    (CASE WHEN i % 2 = 1 THEN 1.0 ELSE 0.7 END)::FLOAT AS temperature,
    CASE WHEN i % 3 = 0 THEN 'length' ELSE 'eos' END AS finish_reason,
    (0.25 * (i % 5))::FLOAT AS reward,
    (i % 2)::FLOAT AS task_reward,
    (0.001 * i)::FLOAT AS length_penalty,
    (CASE WHEN i % 4 = 0 THEN 0 ELSE 512 END)::INTEGER AS target_length,
    ((i % 5) - 2)::FLOAT AS advantage,
    CASE WHEN i % 3 = 0 THEN repeat(chr((65 + i % 26)::INTEGER), 258 * (1 + i % 2))::BLOB ELSE ''::BLOB END
      AS proof
  FROM range(${n}) r(i)
  ORDER BY i`;

async function write(conn, dir) {
  await conn.run(`CREATE TABLE rollouts AS ${table(10)}`);
  await conn.run(`CREATE TABLE many AS ${table(5000)}`);
  const out = (name) => sqlString(path.join(dir, name));
  // Small row groups so that the files hold several.
  await conn.run(`COPY rollouts TO ${out('zstd.parquet')}
    (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 4,
     KV_METADATA {'trellis.schema_version': '1', model: 'duck'})`);
  await conn.run(`COPY rollouts TO ${out('uncompressed.parquet')}
    (FORMAT parquet, COMPRESSION uncompressed)`);
  await conn.run(`COPY rollouts TO ${out('snappy.parquet')} (FORMAT parquet)`);
  await conn.run(`COPY rollouts TO ${out('v2.parquet')}
    (FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION v2)`);
  await conn.run(`COPY (SELECT * REPLACE (CASE WHEN task_id = 'task-3' THEN NULL ELSE task_id END
      AS task_id) FROM rollouts)
    TO ${out('nulls.parquet')} (FORMAT parquet, COMPRESSION zstd)`);
  await conn.run(`COPY many TO ${out('many.parquet')}
    (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 2048)`);
  const rows = (await conn.runAndReadAll(`SELECT ${ROW_SELECT} FROM rollouts ORDER BY seed`))
    .getRowObjectsJson();
  const many = (await conn.runAndReadAll(`SELECT ${ROW_SELECT} FROM many ORDER BY seed`))
    .getRowObjectsJson();
  return { rows, many };
}

async function main() {
  const [mode, target] = process.argv.slice(2);
  if (!['read', 'write'].includes(mode) || !target) {
    throw new Error('usage: node duckdb_rollouts.js read FILE | write DIR');
  }
  const db = await DuckDBInstance.create(':memory:');
  const conn = await db.connect();
  const result = mode === 'read' ? await read(conn, target) : await write(conn, target);
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((err) => {
  console.error(`duckdb_rollouts.js: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
