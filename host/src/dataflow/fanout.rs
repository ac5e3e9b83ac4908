//! Where one output port of a task goes (DESIGN.md §8): every reader of it, an operator
//! read by key (a channel per subtask, each record to the subtask owning its key group),
//! or one channel (the subtask of the same index, or the sink task). Records go to every
//! reader; barriers, watermarks and idleness to every channel; a dead letter takes the
//! first channel only, so that it reaches the sink once whatever the graph's fan-out.

use crossbeam_channel::Sender;

use super::{DeadLetter, KeyGroups, Message, Records, TaskFailure};

/// One reader of a port.
pub(crate) enum Reader {
    /// An operator whose input is routed by key: `subtasks[i]` leads to its subtask i.
    Keyed { subtasks: Vec<Sender<Message>>, key_groups: KeyGroups },
    /// One channel: to the reader's subtask of the writer's index, or to the sink task.
    Forward(Sender<Message>),
}

/// Every reader of one port, in the job's order.
#[derive(Default)]
pub(crate) struct Fanout {
    readers: Vec<Reader>,
}

impl Fanout {
    pub(crate) fn new(readers: Vec<Reader>) -> Fanout {
        Fanout { readers }
    }

    /// Whether some reader routes by key.
    pub(crate) fn is_keyed(&self) -> bool {
        self.readers.iter().any(|reader| matches!(reader, Reader::Keyed { .. }))
    }

    /// Sends `records` to every reader: split by key group to a keyed one.
    pub(crate) fn records(&self, records: Records) -> Result<(), TaskFailure> {
        let Some((last, others)) = self.readers.split_last() else {
            return Ok(());
        };
        for reader in others {
            send_to(reader, records.clone())?;
        }
        send_to(last, records)
    }

    /// Sends a barrier, a watermark or idleness down every channel.
    pub(crate) fn marker(&self, marker: &Message) -> Result<(), TaskFailure> {
        for reader in &self.readers {
            match reader {
                Reader::Keyed { subtasks, .. } => {
                    for channel in subtasks {
                        send(channel, copy_marker(marker))?;
                    }
                }
                Reader::Forward(channel) => send(channel, copy_marker(marker))?,
            }
        }
        Ok(())
    }

    /// Sends a dead letter down the first channel only: it is written once.
    pub(crate) fn dead_letter(&self, letter: DeadLetter) -> Result<(), TaskFailure> {
        let channel = match self.readers.first() {
            Some(Reader::Keyed { subtasks, .. }) => &subtasks[0],
            Some(Reader::Forward(channel)) => channel,
            None => return Ok(()),
        };
        send(channel, Message::DeadLetter(letter))
    }
}

fn send_to(reader: &Reader, records: Records) -> Result<(), TaskFailure> {
    match reader {
        Reader::Forward(channel) => send(channel, Message::Records(records)),
        Reader::Keyed { subtasks, .. } if subtasks.len() == 1 => send(&subtasks[0], Message::Records(records)),
        Reader::Keyed { subtasks, key_groups } => {
            let mut routed: Vec<Records> = vec![Records::default(); subtasks.len()];
            for (index, record) in records.batch.iter().enumerate() {
                routed[key_groups.subtask_for(record.key, subtasks.len())].push_from(&records, index);
            }
            for (channel, part) in subtasks.iter().zip(routed) {
                if !part.is_empty() {
                    send(channel, Message::Records(part))?;
                }
            }
            Ok(())
        }
    }
}

fn copy_marker(marker: &Message) -> Message {
    match marker {
        Message::Watermark(watermark) => Message::Watermark(*watermark),
        Message::Idle => Message::Idle,
        Message::Barrier(n) => Message::Barrier(*n),
        Message::TableEnd => Message::TableEnd,
        Message::Records(_) | Message::DeadLetter(_) => unreachable!("only markers go down every channel"),
    }
}

fn send(channel: &Sender<Message>, message: Message) -> Result<(), TaskFailure> {
    channel.send(message).map_err(|_| TaskFailure::Stopped)
}
