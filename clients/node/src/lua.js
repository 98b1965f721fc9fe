// The Lua this package calls, shipped in ../lua (scripts/build-clients writes it with delayd's own linker,
// delayd/store/lua_lib.py, from delayd/store/lua): each script's linked source, and so the SHA1, the Python
// client sends with EVALSHA; the function library as Python loads it (library.lua) and the names Python
// calls it by (library.json). Nothing outside the package is read.
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';

const loaded = new Map();
const read = (file) => readFileSync(new URL(`../lua/${file}`, import.meta.url), 'utf8');

/** The linked source of script `name` (add, delete) and its SHA1, read once per process. */
export function script(name) {
  if (!loaded.has(name)) {
    const source = read(`${name}.lua`);
    loaded.set(name, { name, source, sha: createHash('sha1').update(source).digest('hex') });
  }
  return loaded.get(name);
}

let shipped = null;

/** delayd's function library, read once per process: `code` (what FUNCTION LOAD takes), `library` (its
 * name), `functions` (script name -> function name), `since` (the first Redis version with functions) and
 * `probe` (a function no library defines). */
export function library() {
  shipped ??= { ...JSON.parse(read('library.json')), code: read('library.lua') };
  return shipped;
}
