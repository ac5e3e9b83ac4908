globalThis.weirLog = [];
export function log(level, message) {
  globalThis.weirLog.push([level, message]);
}
