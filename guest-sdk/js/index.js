// weir-operator: write weir stream operators in JavaScript. An operator is a subclass
// of Operator; `exportOperator` makes it the component's exports, and the state
// helpers take care of checkpoints (wit/operator.wit). README.md has an example.

export { Operator } from './operator.js';
export { exportOperator } from './glue.js';
export { Config } from './config.js';
export { Record } from './batch.js';
export { KeyedState, MAX_ENTRY_BYTES } from './state.js';
export { SessionWindows, TumblingWindows } from './windows.js';
export { WeirError } from './errors.js';
export { log } from './log.js';
export { text, utf8 } from './bytes.js';
