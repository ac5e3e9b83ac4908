// js-total: a running total of a numeric JSON field per record key, on the JavaScript
// SDK (guest-sdk/js). Config: `field` (required). For each record whose value is a JSON
// object with a number in `field`, the key's total grows by it and one record is
// emitted: the same key (an absent key stays absent; it totals under the empty key),
// the value {"key":"<key>","total":<total>} and the input's timestamp. Other records,
// and one that would make the total infinite, are dropped. py-total computes the same
// (README.md says where JavaScript numbers print otherwise).
import { KeyedState, Operator, exportOperator } from 'weir-operator';

class Total extends Operator {
  static plugin = 'js-total';

  constructor(config) {
    super(config);
    this.field = config.require('field', 'js-total adds up the number in this top-level JSON field per key');
    this.totals = new KeyedState();
  }

  process(records) {
    for (const record of records) {
      const document = record.json();
      const isObject = typeof document === 'object' && document !== null && !Array.isArray(document);
      const amount = isObject ? document[this.field] : undefined;
      if (typeof amount !== 'number') continue;
      const total = (this.totals.get(record.key) ?? 0) + amount;
      if (!Number.isFinite(total)) continue;
      this.totals.set(record.key, total);
      this.emit(record.key, JSON.stringify({ key: record.keyText(), total }), record.timestamp);
    }
  }
}

export const { init, process, onWatermark, snapshot, restore, restored } = exportOperator(Total);
