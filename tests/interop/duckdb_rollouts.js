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
//   node tests/interop/duckdb_rollouts.js edit IN OUT EDIT [VALUE]
//     Has DuckDB rewrite the rollout file IN as OUT (zstd), its rows changed by EDIT, one of the
//     dishonest edits of the attack matrix (specs/toploc.md §7) that need no model: copy (none),
//     edited_tokens (the second half of each completion but its last token shifted by 7 modulo
//     VALUE, the first special token id: the edit stays among ordinary tokens), truncated (half
//     of each completion of 4 tokens or more, finish_reason 'length'), early_eos (a third of
//     each such completion, then the stop token VALUE, finish_reason 'eos'),
//     cherry_picked (each group given the next group's task_id), repeated_prompts (group 0's
//     rows in every group), inflated_rewards (every reward 1), inflated_advantages (10 x + 1),
//     wrong_proof_length (each proof twice), relabelled_step (step + 5), another_node
//     (node_address VALUE). Prints {"rows": N}.
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

// The SELECT over table `r` (the input's rows, with their row number `i`) that makes each edit.
// Every replaced column keeps its type, so that OUT has the rollout schema.
function editQuery(edit, value) {
  // Truncations touch only completions of 4 tokens or more, so that what is left still needs the
  // proof chunks the row has (an edit without the model cannot make new ones).
  const ifLong = (cut, col) =>
    `CASE WHEN len(completion_tokens) >= 4 THEN ${cut} ELSE ${col} END`;
  const half = (col) => ifLong(`${col}[1:len(${col}) // 2]`, col);
  const finish = (reason) => ifLong(`'${reason}'`, 'finish_reason');
  const edits = {
    copy: 'SELECT * EXCLUDE (i) FROM r ORDER BY i',
    edited_tokens: `SELECT * EXCLUDE (i) REPLACE (list_concat(
        completion_tokens[1:len(completion_tokens) // 2],
        list_transform(completion_tokens[len(completion_tokens) // 2 + 1:len(completion_tokens) - 1],
                       t -> ((t + 7) % ${Number(value)})::INTEGER),
        completion_tokens[len(completion_tokens):len(completion_tokens)]) AS completion_tokens)
      FROM r ORDER BY i`,
    truncated: `SELECT * EXCLUDE (i) REPLACE (${half('completion_tokens')} AS completion_tokens,
        ${half('completion_logprobs')} AS completion_logprobs,
        ${half('token_versions')} AS token_versions, ${finish('length')} AS finish_reason)
      FROM r ORDER BY i`,
    early_eos: `SELECT * EXCLUDE (i) REPLACE (
        ${ifLong(`list_append(completion_tokens[1:len(completion_tokens) // 3],
                              ${Number(value)}::INTEGER)`, 'completion_tokens')}
          AS completion_tokens,
        ${ifLong('completion_logprobs[1:len(completion_logprobs) // 3 + 1]', 'completion_logprobs')}
          AS completion_logprobs,
        ${ifLong('token_versions[1:len(token_versions) // 3 + 1]', 'token_versions')}
          AS token_versions,
        ${finish('eos')} AS finish_reason)
      FROM r ORDER BY i`,
    cherry_picked: `SELECT r.* EXCLUDE (i) REPLACE (n.task_id AS task_id) FROM r
      JOIN (SELECT DISTINCT group_index, task_id FROM r) n
        ON n.group_index = (r.group_index + 1) % (SELECT max(group_index) + 1 FROM r)
      ORDER BY i`,
    repeated_prompts: `SELECT r0.* EXCLUDE (i) REPLACE (g.group_index AS group_index)
      FROM (SELECT DISTINCT group_index FROM r) g, (SELECT * FROM r WHERE group_index = 0) r0
      ORDER BY g.group_index, r0.i`,
    inflated_rewards: `SELECT * EXCLUDE (i) REPLACE (1::FLOAT AS reward, 1::FLOAT AS task_reward)
      FROM r ORDER BY i`,
    inflated_advantages: `SELECT * EXCLUDE (i) REPLACE ((advantage * 10 + 1)::FLOAT AS advantage)
      FROM r ORDER BY i`,
    wrong_proof_length: 'SELECT * EXCLUDE (i) REPLACE (proof || proof AS proof) FROM r ORDER BY i',
    relabelled_step: `SELECT * EXCLUDE (i) REPLACE ((step + 5)::INTEGER AS step)
      FROM r ORDER BY i`,
    another_node: `SELECT * EXCLUDE (i) REPLACE (${sqlString(String(value))} AS node_address)
      FROM r ORDER BY i`,
  };
  if (!(edit in edits)) throw new Error(`unknown edit '${edit}'`);
  return edits[edit];
}

async function edit(conn, input, output, name, value) {
  await conn.run(`CREATE TABLE r AS
    SELECT *, row_number() OVER () AS i FROM read_parquet(${sqlString(input)})`);
  await conn.run(`COPY (${editQuery(name, value)}) TO ${sqlString(output)}
    (FORMAT parquet, COMPRESSION zstd)`);
  const n = await conn.runAndReadAll(`SELECT count(*)::INTEGER AS n FROM read_parquet(
    ${sqlString(output)})`);
  return { rows: n.getRowObjectsJson()[0].n };
}

async function main() {
  const [mode, target, ...rest] = process.argv.slice(2);
  if (!['read', 'write', 'edit'].includes(mode) || !target) {
    throw new Error(
      'usage: node duckdb_rollouts.js read FILE | write DIR | edit IN OUT EDIT [VALUE]');
  }
  const db = await DuckDBInstance.create(':memory:');
  const conn = await db.connect();
  const result = mode === 'read' ? await read(conn, target)
    : mode === 'write' ? await write(conn, target)
    : await edit(conn, target, rest[0], rest[1], rest[2]);
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((err) => {
  console.error(`duckdb_rollouts.js: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
