// JSON text written as Python's json module writes it (delayd/model/task.py), so that a task
// added from Node is stored byte for byte as the same task added from Python: compact
// separators, every non-ASCII character escaped (\uXXXX, lowercase hex), floats as Python's
// repr (1e-05, 1.5e+16, 2.5). A JS number that is an integer is written as one (2.0 and 2 are
// one value in JS). Python's messages show values as its repr does: pyRepr.

export class NotJson extends Error {}

/** A string as a JSON string literal, ASCII only (json.encoder.encode_basestring_ascii). */
export function jsonString(text) {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += '\\\\';
    else if (c >= 0x20 && c < 0x7f) out += text[i];
    else if (c === 0x0a) out += '\\n';
    else if (c === 0x0d) out += '\\r';
    else if (c === 0x09) out += '\\t';
    else if (c === 0x08) out += '\\b';
    else if (c === 0x0c) out += '\\f';
    else out += '\\u' + c.toString(16).padStart(4, '0');
  }
  return out + '"';
}

/** A finite number as Python writes it: an integer's digits, a float's repr. */
export function pyNumber(n) {
  if (Number.isSafeInteger(n)) return String(n);
  const [mantissa, exp] = n.toExponential().split('e'); // the shortest digits that round-trip, as repr's
  const e = Number(exp);
  if (e >= -4 && e < 16) return String(n); // positional there, in both languages
  return `${mantissa}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
}

/** `value` as compact ASCII JSON; NotJson (with Python's reason) for what JSON cannot hold. */
export function compactJson(value, depth = 0) {
  if (depth > 900) throw new NotJson('maximum recursion depth exceeded');
  if (value === null) return 'null';
  if (value === true) return 'true';
  if (value === false) return 'false';
  if (typeof value === 'string') return jsonString(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new NotJson(`Out of range float values are not JSON compliant: ${pyRepr(value)}`);
    return pyNumber(value);
  }
  if (Array.isArray(value)) return '[' + value.map((v) => compactJson(v, depth + 1)).join(',') + ']';
  if (typeof value === 'object' && (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null)) {
    return '{' + Object.entries(value).map(([k, v]) => jsonString(k) + ':' + compactJson(v, depth + 1)).join(',') + '}';
  }
  const kind = value === undefined ? 'undefined' : typeof value === 'object' ? value.constructor?.name || 'object' : typeof value;
  throw new NotJson(`Object of type ${kind} is not JSON serializable`);
}

// What Python's repr escapes in a string (str.isprintable: controls, format and unassigned characters,
// surrogates, separators; the space apart).
const NOT_PRINTABLE = /^[\p{C}\p{Z}]$/u;

/** Python's repr of a JSON-like value, for error messages that read as the Python client's. */
export function pyRepr(value) {
  if (value === null || value === undefined) return 'None';
  if (value === true) return 'True';
  if (value === false) return 'False';
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return 'nan';
    if (!Number.isFinite(value)) return value > 0 ? 'inf' : '-inf';
    return pyNumber(value);
  }
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string') {
    const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
    let out = quote;
    for (const ch of value) {
      const c = ch.codePointAt(0);
      if (ch === quote || ch === '\\') out += '\\' + ch;
      else if (ch === '\n') out += '\\n';
      else if (ch === '\r') out += '\\r';
      else if (ch === '\t') out += '\\t';
      else if (ch === ' ' || !NOT_PRINTABLE.test(ch)) out += ch;
      else if (c < 0x100) out += '\\x' + c.toString(16).padStart(2, '0');
      else out += c < 0x10000 ? '\\u' + c.toString(16).padStart(4, '0') : '\\U' + c.toString(16).padStart(8, '0');
    }
    return out + quote;
  }
  if (Array.isArray(value)) return '[' + value.map(pyRepr).join(', ') + ']';
  if (typeof value === 'object') {
    return '{' + Object.entries(value).map(([k, v]) => `${pyRepr(k)}: ${pyRepr(v)}`).join(', ') + '}';
  }
  return String(value);
}
