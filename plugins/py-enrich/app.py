"""py-enrich: enriches each click with the profile of its user, a stream–table join on
weir_sdk's `Table`, keyed by user id; the Python twin of plugins/enrich.

Inputs (the operator's `inputs` in the job file):
- `clicks`, a stream: JSON objects (`{"user":"u1","page":"/"}`) keyed by user id;
- `users`, a table (`table = true`): key = user id, value = the profile as a JSON
  object; an empty value (a tombstone) removes the user, and so does a value that is
  not a JSON object (logged: the table holds the latest row, and that row is unusable).

Outputs: the first gets each click, keyed by its user id with its timestamp and
headers, its value the click's fields, then the profile's fields (prefixed by
`prefix`; they replace a click field of the same name), then `"matched": true`; a
click whose user has no profile gets only `"matched": false`. Fields come in name
order, compact, as enrich writes them (but numbers as Python prints them: one in
exponent form reads `1e+16` where enrich writes `1e16`, an integer beyond 64 bits stays
exact where enrich writes the nearest float). An output named `invalid`, if
present, gets clicks that are not JSON objects unchanged (otherwise they are dropped,
and counted).

Config (`[operators.config]`, all optional): `fields` (the profile fields to copy,
comma-separated; default all), `prefix` (put before each copied field's name;
default none), `matched_field` (the name of the marker; default `matched`),
`unmatched` (`emit`, the default, or `drop`: what becomes of a click without a
profile), `key_field` (key the enriched click by this field of it instead of the user
id: a string by its text, another JSON value by its JSON, a click without it by the
empty key).

State: the SDK's `Table`, one entry per user: the state version byte 0x01, then the
profile in compact JSON.
"""

import json

import weir_sdk


def no_constants(name):
    raise ValueError(f"{name} is not a JSON number")


def json_object(value):
    """The JSON object `value` holds (UTF-8, no NaN or Infinity, no lone surrogate such
    as `"\\ud800"`: what enrich reads as one), or None."""
    try:
        text = value.decode("utf-8")
        document = json.loads(text, parse_constant=no_constants)
        if ("\\ud" in text or "\\uD" in text) and document is not None:
            json.dumps(document, ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # UnicodeDecodeError and -EncodeError are ValueErrors
        return None
    return document if isinstance(document, dict) else None


def compact(fields):
    """`fields` as enrich writes them: compact JSON in name order, as UTF-8."""
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


class Enrich(weir_sdk.Operator):
    def __init__(self, config):
        config.input("clicks")
        self.users_input = config.input("users")
        config.deny_unknown_inputs("clicks", "users")
        names = config.get("fields")
        self.fields = None if names is None else [n.strip() for n in names.split(",") if n.strip()]
        if self.fields == []:
            raise weir_sdk.ConfigError(
                "operator config `fields` names no field: list the profile fields to copy, "
                'comma-separated (e.g. "name,country"), or leave it out to copy all')
        self.prefix = config.get("prefix", "")
        self.matched_field = config.get("matched_field", "matched")
        if not self.matched_field:
            raise weir_sdk.ConfigError(
                "operator config `matched_field` is empty: name the field that says whether "
                "a profile was found (default `matched`)")
        unmatched = config.get("unmatched", "emit").strip()
        if unmatched not in ("emit", "drop"):
            raise weir_sdk.ConfigError(
                f"operator config `unmatched` = {json.dumps(unmatched)} is not valid: expected "
                "`emit` (the default: a click without a profile is emitted with `matched_field` "
                "false) or `drop`")
        self.drop_unmatched = unmatched == "drop"
        self.key_field = config.get("key_field", "").strip() or None
        self.invalid = config.find_output("invalid")
        if self.invalid == 0:
            raise weir_sdk.ConfigError(
                "the first output gets the enriched clicks, but it is named `invalid`, the output "
                "for clicks that are not JSON objects; its outputs are "
                f"{json.dumps(config.outputs)}: put another output first")
        self.invalid_clicks = 0
        self.invalid_rows = 0
        self.users = weir_sdk.Table("profile", check=lambda row: isinstance(row, dict),
                                    encode=weir_sdk.encode_json, decode=weir_sdk.decode_json)

    def process(self, records):
        if records.input == self.users_input:
            for row in records:
                self.users.update(row, self.profile)
        else:
            for click in records:
                self.click(click)

    def profile(self, value):
        """A profile row as the table keeps it; None (removing the user) if unusable."""
        profile = json_object(value)
        if profile is None:
            if self.invalid_rows == 0:
                weir_sdk.log.warn("py-enrich removes users whose profile is not a JSON object; "
                                  f"the first is {value[:40]!r}")
            self.invalid_rows += 1
        return profile

    def click(self, click):
        fields = json_object(click.value)
        if fields is None:
            self.refuse(click)
            return
        profile = self.users.lookup(click)
        if profile is None and self.drop_unmatched:
            return
        for name, value in (profile or {}).items():
            if self.fields is None or name in self.fields:
                fields[self.prefix + name] = value
        fields[self.matched_field] = profile is not None
        self.emit(self.key_of(fields, click), compact(fields), click.timestamp, click.headers)

    def key_of(self, fields, click):
        """The enriched click's key: its user's, or that of field `key_field`."""
        if self.key_field is None:
            return click.key
        value = fields.get(self.key_field)
        if value is None:
            return b""
        if isinstance(value, str):
            return value.encode()
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def refuse(self, click):
        """A click that is not a JSON object: to `invalid`, else dropped and counted."""
        if self.invalid is not None:
            self.forward_to(self.invalid, click)
            return
        if self.invalid_clicks == 0:
            weir_sdk.log.warn("py-enrich drops clicks that are not JSON objects and has no "
                              f"`invalid` output; the first at timestamp {click.timestamp}")
        self.invalid_clicks += 1


WitWorld = weir_sdk.export(Enrich)
