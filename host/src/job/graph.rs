//! A job as a graph (DESIGN.md §8): the job file's two forms made one, and the checks
//! that span entries. A chain (`[source]`, `[[operators]]`, `[sink]`) is the graph of one
//! source, each operator reading the one before it, and one sink. A graph names its
//! sources, its operators' inputs and its sinks' `from`; an edge names a source, an
//! operator (its first output) or one output of it (`operator/output`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use toml::Spanned;

use super::{JobErrorKind, JobFile, Job, Operator, Producer, Sink, Source, Start, MAX_SINKS, MAX_SOURCES};

/// Where an edge starts: a source, or one output of an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Port {
    Source(usize),
    Operator { stage: usize, output: usize },
}

/// Where an edge ends: input `input` of the operator at `stage`, or a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Input {
    Operator { stage: usize, input: usize },
    Sink(usize),
}

impl Job {
    /// The port an edge's name stands for: a source, an operator's first output, or
    /// `operator/output`.
    pub fn port(&self, name: &str) -> Option<Port> {
        let (node, output) = match name.split_once('/') {
            Some((node, output)) => (node, Some(output)),
            None => (name, None),
        };
        if let Some(index) = self.sources.iter().position(|s| s.name == node) {
            return output.is_none().then_some(Port::Source(index));
        }
        let stage = self.operators.iter().position(|o| o.name == node)?;
        let output = match output {
            None => 0,
            Some(output) => self.operators[stage].outputs.iter().position(|o| o == output)?,
        };
        Some(Port::Operator { stage, output })
    }

    /// What the operator at `stage` reads, in the order of its `inputs`.
    pub fn inputs_of(&self, stage: usize) -> Vec<Port> {
        self.operators[stage].inputs.iter().map(|name| self.port(name).expect("inputs checked at load")).collect()
    }

    /// Every reader of `port`: operator inputs first, in stage order, then sinks.
    pub fn readers_of(&self, port: Port) -> Vec<Input> {
        let operators = self.operators.iter().enumerate().flat_map(|(stage, operator)| {
            let reads = operator.inputs.iter().enumerate().filter(|(_, name)| self.port(name) == Some(port));
            reads.map(move |(input, _)| Input::Operator { stage, input }).collect::<Vec<_>>()
        });
        let sinks = self.sinks.iter().enumerate().filter(|(_, sink)| sink.from.iter().any(|name| self.port(name) == Some(port)));
        operators.chain(sinks.map(|(index, _)| Input::Sink(index))).collect()
    }

    /// Every stage, each after every operator it reads.
    pub fn upstream_first(&self) -> Vec<usize> {
        fn visit(job: &Job, stage: usize, done: &mut [bool], order: &mut Vec<usize>) {
            if std::mem::replace(&mut done[stage], true) {
                return;
            }
            for port in job.inputs_of(stage) {
                if let Port::Operator { stage: upstream, .. } = port {
                    visit(job, upstream, done, order);
                }
            }
            order.push(stage);
        }
        let mut done = vec![false; self.operators.len()];
        let mut order = Vec::with_capacity(self.operators.len());
        for stage in 0..self.operators.len() {
            visit(self, stage, &mut done, &mut order);
        }
        order
    }

    /// Whether the operator at `stage` reads a table.
    pub fn reads_table(&self, stage: usize) -> bool {
        self.inputs_of(stage).into_iter().any(|port| self.is_table(port))
    }

    /// Whether the input `port` is a table.
    pub fn is_table(&self, port: Port) -> bool {
        matches!(port, Port::Source(index) if self.sources[index].table)
    }

    /// The brokers every source is on.
    pub fn source_brokers(&self) -> &str {
        &self.sources[0].brokers
    }

    /// The consumer properties of the clients that read the job's offsets and group.
    pub fn source_kafka(&self) -> &BTreeMap<String, String> {
        &self.sources[0].kafka
    }
}

/// The checked job of a parsed job file (`text` gives each entry's line).
pub(super) fn build(file: JobFile, text: &str) -> Result<Job, JobErrorKind> {
    let chain = file.source.is_some() || file.sink.is_some();
    let graph = file.sources.is_some() || file.sinks.is_some() || file.producer.is_some();
    let lines = Lines(text);
    let (sources, operators, sinks, producer) = match (chain, graph) {
        (true, true) => {
            return Err(JobErrorKind::Form(
                "the job file mixes the chain form ([source] and [sink]) with the graph form ([[sources]], \
                 [[sinks]] and [producer]); write one of them"
                    .into(),
            ));
        }
        (false, false) => {
            return Err(JobErrorKind::Form(
                "the job file has neither [source] and [sink] (a chain of operators) nor [[sources]], [[sinks]] \
                 and [producer] (a graph); see README \"Writing a job\""
                    .into(),
            ));
        }
        (true, false) => chain_form(file.source, file.operators, file.sink, lines)?,
        (false, true) => graph_form(file.sources, file.operators, file.sinks, file.producer)?,
    };
    let job = Job {
        name: file.name,
        parallelism: file.parallelism,
        key_groups: file.key_groups,
        changelog_topic: file.changelog_topic,
        checkpoint_interval_ms: file.checkpoint_interval_ms,
        state_dir: file.state_dir,
        scale_out: file.scale_out,
        sources: sources.iter().map(|s| s.get_ref().clone()).collect(),
        operators: operators.iter().map(|o| o.get_ref().clone()).collect(),
        sinks: sinks.iter().map(|s| s.get_ref().clone()).collect(),
        producer,
        restarts: file.restarts,
    };
    check_graph(&job, &sources, &operators, &sinks, lines)?;
    Ok(job)
}

type Parts = (Vec<Spanned<Source>>, Vec<Spanned<Operator>>, Vec<Spanned<Sink>>, Producer);

/// The chain form as a graph: `source` → each operator in order → `sink`.
fn chain_form(
    source: Option<Spanned<Source>>,
    mut operators: Vec<Spanned<Operator>>,
    sink: Option<Spanned<super::ChainSink>>,
    lines: Lines<'_>,
) -> Result<Parts, JobErrorKind> {
    let missing = |what: &str| JobErrorKind::Form(format!("missing {what}: a chain job has one [source] and one [sink]"));
    let source = source.ok_or_else(|| missing("[source]"))?;
    let sink = sink.ok_or_else(|| missing("[sink]"))?;
    if source.get_ref().table {
        return Err(graph_error(lines.of(source.span()), "a chain's [source] cannot be a table: a table is read beside a stream; use [[sources]]".into()));
    }
    let mut upstream = source.get_ref().name.clone();
    for operator in &mut operators {
        let line = lines.of(operator.span());
        let spec = operator.get_mut();
        if !spec.inputs.is_empty() || spec.outputs != super::default_outputs() {
            return Err(graph_error(
                line,
                format!(
                    "operator `{}` sets inputs or outputs, which belong to the graph form ([[sources]], [[sinks]], \
                     [producer]); in a chain each operator reads the one before it",
                    spec.name
                ),
            ));
        }
        spec.inputs = vec![std::mem::replace(&mut upstream, spec.name.clone())];
    }
    let span = sink.span();
    let sink = sink.into_inner();
    let producer = Producer {
        brokers: sink.brokers,
        delivery: sink.delivery,
        dead_letter_topic: sink.dead_letter_topic,
        kafka: sink.kafka,
    };
    let sink = Spanned::new(span, Sink { name: "sink".into(), topic: sink.topic, from: vec![upstream] });
    Ok((vec![source], operators, vec![sink], producer))
}

fn graph_form(
    sources: Option<Vec<Spanned<Source>>>,
    operators: Vec<Spanned<Operator>>,
    sinks: Option<Vec<Spanned<Sink>>>,
    producer: Option<Producer>,
) -> Result<Parts, JobErrorKind> {
    let form = |problem: &str| JobErrorKind::Form(format!("{problem}; see README \"Writing a job\""));
    let sources = sources.filter(|s| !s.is_empty()).ok_or_else(|| form("a graph job needs at least one [[sources]]"))?;
    let sinks = sinks.filter(|s| !s.is_empty()).ok_or_else(|| form("a graph job needs at least one [[sinks]]"))?;
    let producer = producer.ok_or_else(|| {
        form("a graph job needs a [producer] table (brokers, delivery, dead_letter_topic, [producer.kafka]): one producer writes every sink")
    })?;
    if sources.len() > MAX_SOURCES {
        return Err(form(&format!("{} [[sources]] is more than {MAX_SOURCES}", sources.len())));
    }
    if sinks.len() > MAX_SINKS {
        return Err(form(&format!("{} [[sinks]] is more than {MAX_SINKS}", sinks.len())));
    }
    Ok((sources, operators, sinks, producer))
}

/// The checks across entries, each naming the line of the entry at fault.
fn check_graph(
    job: &Job,
    sources: &[Spanned<Source>],
    operators: &[Spanned<Operator>],
    sinks: &[Spanned<Sink>],
    lines: Lines<'_>,
) -> Result<(), JobErrorKind> {
    let mut operator_names = BTreeSet::new();
    if let Some(twice) = job.operators.iter().find(|o| !operator_names.insert(o.name.as_str())) {
        return Err(JobErrorKind::DuplicateOperator { name: twice.name.clone() });
    }
    let mut names = BTreeSet::new();
    let entries = sources
        .iter()
        .map(|s| (&s.get_ref().name, s.span()))
        .chain(operators.iter().map(|o| (&o.get_ref().name, o.span())))
        .chain(sinks.iter().map(|s| (&s.get_ref().name, s.span())));
    for (name, span) in entries {
        if !names.insert(name.clone()) {
            let problem = format!("two entries are named `{name}`; sources, operators and sinks share one namespace: rename one");
            return Err(graph_error(lines.of(span), problem));
        }
    }
    for source in sources {
        let spec = source.get_ref();
        let line = lines.of(source.span());
        if spec.brokers != job.source_brokers() {
            let problem = format!(
                "source `{}` is on brokers `{}`, the first source on `{}`: every input offset is committed in one \
                 transaction, so all sources are on one cluster",
                spec.name,
                spec.brokers,
                job.source_brokers()
            );
            return Err(graph_error(line, problem));
        }
        if spec.table && spec.start == Start::Latest {
            let problem = format!("table `{}` has start = \"latest\": a table is read from its start; remove `start`", spec.name);
            return Err(graph_error(line, problem));
        }
    }
    for (stage, operator) in operators.iter().enumerate() {
        check_inputs(job, &operator.get_ref().name, &operator.get_ref().inputs, "inputs", lines.of(operator.span()))?;
        let key_by = operator.get_ref().key_by;
        for port in job.inputs_of(stage) {
            if job.is_table(port) && !key_by {
                let problem = format!(
                    "operator `{}` reads table `{}` but is not key_by: each subtask would hold a part of the table \
                     that its records' keys do not choose; set key_by = true",
                    operator.get_ref().name,
                    name_of(job, port)
                );
                return Err(graph_error(lines.of(operator.span()), problem));
            }
        }
    }
    for sink in sinks {
        check_inputs(job, &sink.get_ref().name, &sink.get_ref().from, "from", lines.of(sink.span()))?;
    }
    check_read(job, sources, operators, lines)?;
    check_acyclic(job, operators, lines)
}

/// An operator's `inputs` or a sink's `from`: at least one, each a port, none twice.
fn check_inputs(job: &Job, reader: &str, names: &[String], key: &str, line: usize) -> Result<(), JobErrorKind> {
    if names.is_empty() {
        return Err(graph_error(line, format!("`{reader}` has no {key}; name the sources or operators it takes")));
    }
    let mut seen = BTreeSet::new();
    for name in names {
        if job.port(name).is_none() {
            return Err(graph_error(line, unknown_port(job, reader, key, name)));
        }
        if !seen.insert(name) {
            return Err(graph_error(line, format!("`{reader}` names `{name}` twice in {key}")));
        }
    }
    Ok(())
}

fn unknown_port(job: &Job, reader: &str, key: &str, name: &str) -> String {
    if let Some((node, output)) = name.split_once('/')
        && let Some(operator) = job.operators.iter().find(|o| o.name == node)
    {
        return format!("`{reader}` {key} names `{name}`, but operator `{node}` has no output `{output}` (its outputs: {:?})", operator.outputs);
    }
    let known: Vec<&str> =
        job.sources.iter().map(|s| s.name.as_str()).chain(job.operators.iter().map(|o| o.name.as_str())).collect();
    format!("`{reader}` {key} names `{name}`, which is no source or operator (there are {known:?})")
}

/// Every source and every operator output is read by something: a record written to
/// a port nobody reads would be lost without a word.
fn check_read(job: &Job, sources: &[Spanned<Source>], operators: &[Spanned<Operator>], lines: Lines<'_>) -> Result<(), JobErrorKind> {
    for (index, source) in sources.iter().enumerate() {
        if job.readers_of(Port::Source(index)).is_empty() {
            let problem = format!("source `{}` is read by no operator or sink; add it to some `inputs` or `from`, or remove it", source.get_ref().name);
            return Err(graph_error(lines.of(source.span()), problem));
        }
    }
    for (stage, operator) in operators.iter().enumerate() {
        for (output, name) in operator.get_ref().outputs.iter().enumerate() {
            if job.readers_of(Port::Operator { stage, output }).is_empty() {
                let spec = operator.get_ref();
                let problem = format!(
                    "output `{name}` of operator `{}` is read by no operator or sink, so what it emits there would \
                     be lost; add `{}` to some `inputs` or `from`, or remove the output",
                    spec.name,
                    if output == 0 { spec.name.clone() } else { format!("{}/{name}", spec.name) }
                );
                return Err(graph_error(lines.of(operator.span()), problem));
            }
        }
    }
    Ok(())
}

/// The operators' inputs make no cycle.
fn check_acyclic(job: &Job, operators: &[Spanned<Operator>], lines: Lines<'_>) -> Result<(), JobErrorKind> {
    // Depth-first, marking each stage on the current path: meeting one again is a cycle.
    fn visit(job: &Job, stage: usize, state: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<usize>> {
        match state[stage] {
            2 => return None,
            1 => {
                let from = path.iter().position(|&s| s == stage).expect("on the path");
                return Some(path[from..].to_vec());
            }
            _ => {}
        }
        state[stage] = 1;
        path.push(stage);
        for port in job.inputs_of(stage) {
            if let Port::Operator { stage: upstream, .. } = port
                && let Some(cycle) = visit(job, upstream, state, path)
            {
                return Some(cycle);
            }
        }
        path.pop();
        state[stage] = 2;
        None
    }
    let mut state = vec![0u8; operators.len()];
    for stage in 0..operators.len() {
        if let Some(cycle) = visit(job, stage, &mut state, &mut Vec::new()) {
            let names: Vec<&str> = cycle.iter().rev().map(|&s| job.operators[s].name.as_str()).collect();
            let problem = format!("operators {} read each other in a cycle; a job is a graph without cycles", names.join(" → "));
            return Err(graph_error(lines.of(operators[cycle[0]].span()), problem));
        }
    }
    Ok(())
}

fn name_of(job: &Job, port: Port) -> String {
    match port {
        Port::Source(index) => job.sources[index].name.clone(),
        Port::Operator { stage, output: 0 } => job.operators[stage].name.clone(),
        Port::Operator { stage, output } => format!("{}/{}", job.operators[stage].name, job.operators[stage].outputs[output]),
    }
}

fn graph_error(line: usize, problem: String) -> JobErrorKind {
    JobErrorKind::Graph { line, problem }
}

/// The job file's text, to turn an entry's span into its line.
#[derive(Clone, Copy)]
struct Lines<'a>(&'a str);

impl Lines<'_> {
    fn of(self, span: Range<usize>) -> usize {
        let start = span.start.min(self.0.len());
        self.0[..start].bytes().filter(|&b| b == b'\n').count() + 1
    }
}
