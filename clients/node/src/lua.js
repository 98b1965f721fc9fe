// The package's own Lua scripts (one copy in the repository: delayd/store/lua), each linked
// with the _lib.lua helpers it uses exactly as delayd/store/lua_lib.py links them, so Redis
// runs the same source (and the same SHA1) whichever producer sent it. A port of lua_lib.source:
// tests/producers/test_node_client.py checks that both give the same text for every script.
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';

// delayd/store/lua, seen from clients/node/src (DELAYD_LUA_DIR points elsewhere, e.g. an installed package's).
export const LUA_DIR = process.env.DELAYD_LUA_DIR || fileURLToPath(new URL('../../../delayd/store/lua/', import.meta.url));

// A top-level definition starts at column 0: `local function f(`, `local a, b =` or `local a`.
const DEFINITION = /^local[ \t]+(?:function[ \t]+(\w+)|([\w \t,]+?)[ \t]*(?:=|$))/gm;
// Long strings and comments, comments, quoted strings; else a name (not a field: `t.name`, `t:name`).
const TOKEN = /--\[(=*)\[[\s\S]*?\]\1\]|\[(=*)\[[\s\S]*?\]\2\]|--[^\n]*|'(?:\\[\s\S]|[^'\\\n])*'|"(?:\\[\s\S]|[^"\\\n])*"|(?<![.:\w])([A-Za-z_]\w*)/g;
const LIB_HERE = '--[[lib]]';
// A `--[[lib]]` line and the script function around it (column-0 `local function` ... `end`).
const RARE_FUNCTION = /^local function [^\n]*\n(?:(?!end\b)[^\n]*\n)*?[ \t]*--\[\[lib\]\][ \t]*\n(?:(?!end\b)[^\n]*\n)*end\b/gm;

function namesIn(source) {
  const names = new Set();
  for (const m of source.matchAll(TOKEN)) if (m[3]) names.add(m[3]);
  return names;
}

function definitions(lib) {
  const lines = lib.split(/(?<=\n)/);
  const offsets = [0];
  for (const line of lines) offsets.push(offsets[offsets.length - 1] + line.length);
  const starts = [];
  for (const m of lib.matchAll(DEFINITION)) {
    let line = lib.slice(0, m.index).split('\n').length - 1;
    while (line > 0 && lines[line - 1].startsWith('--')) line -= 1; // its comment goes with it
    const names = (m[1] || m[2]).split(',').map((n) => n.trim());
    starts.push([offsets[line], new Set(names), Boolean(m[1])]);
  }
  return starts.map(([start, names, fn], i) => {
    const text = lib.slice(start, i + 1 < starts.length ? starts[i + 1][0] : lib.length);
    const uses = new Set([...namesIn(text)].filter((n) => !names.has(n)));
    return { names, source: text, uses, fn };
  });
}

const meets = (a, b) => [...a].some((n) => b.has(n));

function needed(defs, source) {
  const wanted = namesIn(source);
  for (const d of [...defs].reverse()) if (meets(d.names, wanted)) for (const n of d.uses) wanted.add(n);
  return defs.filter((d) => meets(d.names, wanted));
}

/** `script` as Redis runs it: the lib definitions it uses in front of it (see lua_lib.py). */
export function link(lib, script) {
  const defs = definitions(lib);
  const rare = [...script.matchAll(RARE_FUNCTION)];
  if (script.split(LIB_HERE).length - 1 !== rare.length) {
    throw new Error(`${LIB_HERE} outside a column-0 \`local function ... end\``);
  }
  const bounds = [0, ...rare.flatMap((m) => [m.index, m.index + m[0].length]), script.length];
  let outside = '';
  for (let i = 0; i < bounds.length; i += 2) outside += script.slice(bounds[i], bounds[i + 1]);
  const data = rare.flatMap((m) => needed(defs, m[0]).filter((d) => !d.fn)).map((d) => d.source).join('');
  const front = needed(defs, outside + data);
  const parts = [];
  let at = 0;
  for (const m of rare) {
    const marker = script.indexOf(LIB_HERE, m.index);
    const line = script.lastIndexOf('\n', marker) + 1; // the marker's line is replaced
    const inside = needed(defs, m[0]).filter((d) => !front.includes(d));
    parts.push(script.slice(at, line), inside.map((d) => d.source).join(''));
    at = script.indexOf('\n', marker) + 1;
  }
  parts.push(script.slice(at));
  return front.map((d) => d.source).join('') + '\n' + parts.join('');
}

const loaded = new Map();

/** The linked source of script `name` (add, delete, ...) and its SHA1, read once per process. */
export function script(name, dir = LUA_DIR) {
  const key = `${dir}\0${name}`;
  if (!loaded.has(key)) {
    const source = link(readFileSync(`${dir}/_lib.lua`, 'utf8'), readFileSync(`${dir}/${name}.lua`, 'utf8'));
    loaded.set(key, { name, source, sha: createHash('sha1').update(source).digest('hex') });
  }
  return loaded.get(key);
}
