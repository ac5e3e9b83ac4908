// The enrichment join of bench/join in Flink: clicks (keyed by user id) connected by key
// with the users topic (key = user id, value = a JSON profile); a KeyedCoProcessFunction
// keeps each user's latest profile in keyed ValueState and writes each click with the
// profile's fields, the bytes plugins/enrich writes. Exactly-once Kafka sink; RocksDB with
// incremental checkpoints under -Dweir.bench.checkpoints=<dir>, as WindowCount. Runs in
// one local JVM and never ends by itself: bench/join stops it once its input is drained.
//
// weir reads a table to its end before any stream record; Flink has no such order, so the
// clicks source here emits nothing until the join has applied every row the users topic
// held at the start (counted in this JVM: the local cluster runs every task in it). The
// gated source stays responsive meanwhile (it reports itself unavailable rather than
// blocking), so checkpoint barriers pass it and the join's alignment cannot stall the
// users; the wait is part of the measured time, as weir's table load is.
package weir.bench;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceEvent;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.type.TypeReference;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.KeyedCoProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class Enrich {
    /** How long the clicks may wait for the users table to load before the job fails. */
    static final long TABLE_LOAD_TIMEOUT_MS = 600_000;

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: Enrich <brokers> <clicks-topic> <users-topic> <output-topic> <job-name> <parallelism> <checkpoint-interval-ms>");
            System.exit(2);
        }
        String brokers = args[0], clicksTopic = args[1], usersTopic = args[2], output = args[3], name = args[4];
        int parallelism = Integer.parseInt(args[5]);
        long checkpointMs = Long.parseLong(args[6]);
        long rows = rowsIn(brokers, usersTopic);

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(WindowCount.stateConfig());
        env.setParallelism(parallelism);
        env.enableCheckpointing(checkpointMs);

        if (rows == 0) {
            LOADED.complete(null);
        }
        LOADED.orTimeout(TABLE_LOAD_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        DataStream<Tuple2<String, String>> clicks = env.fromSource(
                new AfterTable<>(source(brokers, clicksTopic, name)), WatermarkStrategy.noWatermarks(),
                "clicks", KeyValueIn.TYPE);
        DataStream<Tuple2<String, String>> users = env.fromSource(
                source(brokers, usersTopic, name), WatermarkStrategy.noWatermarks(), "users");

        Properties producer = new Properties();
        producer.setProperty("transaction.timeout.ms", "600000");
        KafkaSink<Tuple2<String, String>> sink = KafkaSink.<Tuple2<String, String>>builder()
                .setBootstrapServers(brokers)
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(name)
                .setKafkaProducerConfig(producer)
                .setRecordSerializer(new WindowCount.KeyValue(output))
                .build();

        clicks.keyBy(kv -> kv.f0)
                .connect(users.keyBy(kv -> kv.f0))
                .process(new Join(rows))
                .returns(Types.TUPLE(Types.STRING, Types.STRING))
                .sinkTo(sink);
        env.execute(name);
    }

    static KafkaSource<Tuple2<String, String>> source(String brokers, String topic, String group) {
        return KafkaSource.<Tuple2<String, String>>builder()
                .setBootstrapServers(brokers)
                .setTopics(topic)
                .setGroupId(group)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setProperty("isolation.level", "read_committed")
                .setDeserializer(new KeyValueIn())
                .build();
    }

    /** Records in the topic now: end minus start offsets (each user is written once, never compacted away). */
    static long rowsIn(String brokers, String topic) {
        Properties props = new Properties();
        props.setProperty("bootstrap.servers", brokers);
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                    .map(p -> new TopicPartition(topic, p.partition())).collect(Collectors.toList());
            Map<TopicPartition, Long> start = consumer.beginningOffsets(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
            return partitions.stream().mapToLong(p -> end.get(p) - start.get(p)).sum();
        }
    }

    /** Rows of the users table the join has applied, in this JVM. */
    static final AtomicLong APPLIED = new AtomicLong();
    /** Completed when the join has applied every row the users topic held at the start. */
    static final CompletableFuture<Void> LOADED = new CompletableFuture<>();

    /** (key, value) as UTF-8 strings. */
    static final class KeyValueIn implements KafkaRecordDeserializationSchema<Tuple2<String, String>> {
        static final TypeInformation<Tuple2<String, String>> TYPE = Types.TUPLE(Types.STRING, Types.STRING);

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Tuple2<String, String>> out) {
            byte[] key = record.key(), value = record.value();
            out.collect(Tuple2.of(key == null ? "" : new String(key, StandardCharsets.UTF_8),
                    value == null ? "" : new String(value, StandardCharsets.UTF_8)));
        }

        @Override
        public TypeInformation<Tuple2<String, String>> getProducedType() {
            return TYPE;
        }
    }

    /** A source whose readers emit nothing until LOADED; otherwise the inner source's. */
    static final class AfterTable<T, S extends SourceSplit, E> implements Source<T, S, E> {
        private final Source<T, S, E> inner;

        AfterTable(Source<T, S, E> inner) { this.inner = inner; }

        @Override public Boundedness getBoundedness() { return inner.getBoundedness(); }
        @Override public SplitEnumerator<S, E> createEnumerator(SplitEnumeratorContext<S> ctx) throws Exception {
            return inner.createEnumerator(ctx);
        }
        @Override public SplitEnumerator<S, E> restoreEnumerator(SplitEnumeratorContext<S> ctx, E state) throws Exception {
            return inner.restoreEnumerator(ctx, state);
        }
        @Override public SimpleVersionedSerializer<S> getSplitSerializer() { return inner.getSplitSerializer(); }
        @Override public SimpleVersionedSerializer<E> getEnumeratorCheckpointSerializer() {
            return inner.getEnumeratorCheckpointSerializer();
        }
        @Override public SourceReader<T, S> createReader(SourceReaderContext ctx) throws Exception {
            return new Reader<>(inner.createReader(ctx));
        }
    }

    /** Unavailable until LOADED (a table that never loads fails the job at its timeout). */
    static final class Reader<T, S extends SourceSplit> implements SourceReader<T, S> {
        private final SourceReader<T, S> inner;

        Reader(SourceReader<T, S> inner) { this.inner = inner; }

        @Override public void start() { inner.start(); }
        @Override public InputStatus pollNext(ReaderOutput<T> output) throws Exception {
            if (!LOADED.isDone()) {
                return InputStatus.NOTHING_AVAILABLE;
            }
            LOADED.get();
            return inner.pollNext(output);
        }
        @Override public CompletableFuture<Void> isAvailable() {
            return LOADED.isDone() ? inner.isAvailable() : LOADED.handle((ok, timedOut) -> null);
        }
        @Override public List<S> snapshotState(long checkpointId) { return inner.snapshotState(checkpointId); }
        @Override public void addSplits(List<S> splits) { inner.addSplits(splits); }
        @Override public void notifyNoMoreSplits() { inner.notifyNoMoreSplits(); }
        @Override public void handleSourceEvents(SourceEvent event) { inner.handleSourceEvents(event); }
        @Override public void notifyCheckpointComplete(long checkpointId) throws Exception {
            inner.notifyCheckpointComplete(checkpointId);
        }
        @Override public void notifyCheckpointAborted(long checkpointId) throws Exception {
            inner.notifyCheckpointAborted(checkpointId);
        }
        @Override public void pauseOrResumeSplits(Collection<String> pause, Collection<String> resume) {
            inner.pauseOrResumeSplits(pause, resume);
        }
        @Override public void close() throws Exception { inner.close(); }
    }

    /** Clicks (input 1) joined with the latest profile of their user (input 2). */
    static final class Join extends KeyedCoProcessFunction<String, Tuple2<String, String>, Tuple2<String, String>,
            Tuple2<String, String>> {
        private static final TypeReference<TreeMap<String, Object>> FIELDS = new TypeReference<>() {};
        private final long rows;
        private transient ValueState<String> profile;
        private transient ObjectMapper json;

        Join(long rows) { this.rows = rows; }

        @Override
        public void open(OpenContext context) {
            profile = getRuntimeContext().getState(new ValueStateDescriptor<>("profile", Types.STRING));
            json = new ObjectMapper();
        }

        /** As plugins/enrich: the click's fields, the profile's, then `matched`, in name order. */
        @Override
        public void processElement1(Tuple2<String, String> click, Context ctx, Collector<Tuple2<String, String>> out)
                throws Exception {
            TreeMap<String, Object> fields;
            try {
                fields = json.readValue(click.f1, FIELDS);
            } catch (IOException notAnObject) {
                return;
            }
            String row = profile.value();
            if (row != null) {
                fields.putAll(json.readValue(row, FIELDS));
            }
            fields.put("matched", row != null);
            out.collect(Tuple2.of(click.f0, json.writeValueAsString(fields)));
        }

        /** A row of the table: a JSON object is the user's profile; anything else removes the user. */
        @Override
        public void processElement2(Tuple2<String, String> user, Context ctx, Collector<Tuple2<String, String>> out)
                throws Exception {
            boolean valid;
            try {
                valid = !user.f1.isEmpty() && json.readValue(user.f1, FIELDS) != null;
            } catch (IOException notAnObject) {
                valid = false;
            }
            if (valid) {
                profile.update(user.f1);
            } else {
                profile.clear();
            }
            if (APPLIED.incrementAndGet() == rows) {
                long since = System.currentTimeMillis() - ManagementFactory.getRuntimeMXBean().getStartTime();
                System.err.println("weir.bench.Enrich: users table loaded (" + rows + " rows) " + since
                        + " ms after the JVM started");
                LOADED.complete(null);
            }
        }
    }
}
