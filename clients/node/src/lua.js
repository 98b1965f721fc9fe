// The Lua scripts this package calls, shipped linked in ../lua (scripts/build-clients writes them with
// delayd's own linker, delayd/store/lua_lib.py, from delayd/store/lua): the very source, and so the
// SHA1, the Python client sends. Nothing outside the package is read.
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';

const loaded = new Map();

/** The linked source of script `name` (add, delete) and its SHA1, read once per process. */
export function script(name) {
  if (!loaded.has(name)) {
    const source = readFileSync(new URL(`../lua/${name}.lua`, import.meta.url), 'utf8');
    loaded.set(name, { name, source, sha: createHash('sha1').update(source).digest('hex') });
  }
  return loaded.get(name);
}
