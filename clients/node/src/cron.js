// Whether a cron expression is one delayd accepts: the checks of cronsim's parser (the cron
// implementation delayd.model.schedule uses), field by field, with its messages. Only the
// check is here: due times come from delayd's one implementation, never from this file.
// tests/producers/test_node_client.py compares its verdicts with cronsim's on a table of expressions.
const RANGES = [[0, 59], [0, 59], [0, 23], [1, 31], [1, 12], [0, 7]];
const NAMES = ['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
const [MINUTE, DAY, MONTH, DOW] = [1, 3, 4, 5];
const DAYS = 'SUN MON TUE WED THU FRI SAT'.split(' ');
const MONTHS = 'JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC'.split(' ');
const DAYS_IN_MONTH = [-1, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const LAST = -1000;
const LAST_WEEKDAY = -1001;

class Bad extends Error {}

const range = (from, to) => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
const bad = (field) => new Bad(`Bad ${NAMES[field]}`);

function integer(field, text) {
  if (!/^[0-9]+$/.test(text)) throw bad(field);
  return Number(text);
}

function value(field, text) {
  if (field === MONTH && MONTHS.includes(text)) return MONTHS.indexOf(text) + 1;
  if (field === DOW && DAYS.includes(text)) return DAYS.indexOf(text);
  const v = integer(field, text);
  if (v < RANGES[field][0] || v > RANGES[field][1]) throw bad(field);
  return v;
}

/** cronsim's Field.parse: the field's values (LAST, LAST_WEEKDAY and [dow, nth] pairs as items). */
function parse(field, s) {
  if (s === '*') return range(...RANGES[field]);
  if (s.includes(',')) return s.split(',').flatMap((term) => parse(field, term));
  if (field === DOW && s.includes('L')) {
    if (!/^[0-9]+$/.test(s.slice(0, -1))) throw bad(field);
    return [[value(field, s.slice(0, -1)), LAST]];
  }
  if (s.includes('#') && field === DOW) {
    const at = s.indexOf('#');
    const nth = integer(field, s.slice(at + 1));
    if (nth < 1 || nth > 5) throw bad(field);
    return [[value(field, s.slice(0, at)), nth]];
  }
  if (s.includes('/')) {
    const at = s.indexOf('/');
    const term = s.slice(0, at);
    const step = integer(field, s.slice(at + 1));
    if (step === 0) throw bad(field);
    const items = [...new Set(parse(field, term))];
    if (items.length === 1 && (items[0] === LAST || items[0] === LAST_WEEKDAY)) return items;
    if (items.length === 1 && !term.includes('-')) return range(items[0], RANGES[field][1]).filter((_, i) => i % step === 0);
    return items.sort((a, b) => a - b).filter((_, i) => i % step === 0);
  }
  if (s.includes('-')) {
    const at = s.indexOf('-');
    const start = value(field, s.slice(0, at));
    const end = value(field, s.slice(at + 1));
    if (end < start) throw bad(field);
    return range(start, end);
  }
  if (field === DAY && s === 'LW') return [LAST_WEEKDAY];
  if (field === DAY && s === 'L') return [LAST];
  return [value(field, s)];
}

/** null if cronsim accepts the five-field `expr`, else its reason (lower case, as schedule.check_cron shows it). */
export function cronProblem(expr) {
  const parts = ['0', ...expr.toUpperCase().split(/\s+/).filter(Boolean)];
  try {
    const fields = parts.map((part, field) => parse(field, part));
    const days = fields[DAY];
    if (Math.min(...days) > 29 && (parts[DAY].startsWith('*') || parts[DOW].startsWith('*'))) {
      if (Math.min(...days) > Math.max(...fields[MONTH].map((m) => DAYS_IN_MONTH[m]))) throw bad(DAY);
    }
  } catch (exc) {
    if (exc instanceof Bad) return exc.message.toLowerCase();
    throw exc;
  }
  return null;
}
