// The error an operator throws for anything the job's owner should fix (a bad config,
// a state it cannot read). The export glue turns it, and any other exception, into the
// `err` string the host reports with the plugin's name.

/** An error whose message is meant for the job's owner: say what is wrong and what to do. */
export class WeirError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'WeirError';
  }
}
