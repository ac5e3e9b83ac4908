// The benchmark's Flink job: Kafka -> keyBy(key) -> 10 s tumbling event-time count -> Kafka,
// exactly-once, with the output format of weir's window-count plugin. Runs in one local JVM
// and never ends by itself: bench/run stops it once the expected output is visible.
//
// For bench/state, two system properties: -Dweir.bench.checkpoints=<dir> keeps state in
// RocksDB with incremental checkpoints under <dir> (retained when the job is killed), and
// -Dweir.bench.restore=<dir>/<job id>/chk-<n> starts from such a checkpoint.
package weir.bench;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

public final class WindowCount {

    public static void main(String[] args) throws Exception {
        if (args.length != 6 && args.length != 7) {
            System.err.println("usage: WindowCount <brokers> <input-topic> <output-topic> <job-name> <parallelism> <checkpoint-interval-ms> [window-ms, default 10000]");
            System.exit(2);
        }
        String brokers = args[0], input = args[1], output = args[2], name = args[3];
        int parallelism = Integer.parseInt(args[4]);
        long checkpointMs = Long.parseLong(args[5]);
        long windowMs = args.length == 7 ? Long.parseLong(args[6]) : 10_000;

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(stateConfig());
        env.setParallelism(parallelism);
        env.enableCheckpointing(checkpointMs);

        KafkaSource<String> source = KafkaSource.<String>builder()
                .setBootstrapServers(brokers)
                .setTopics(input)
                .setGroupId(name)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setProperty("isolation.level", "read_committed")
                .setDeserializer(new KeyOnly())
                .build();

        Properties producer = new Properties();
        producer.setProperty("transaction.timeout.ms", "600000");
        KafkaSink<Tuple2<String, String>> sink = KafkaSink.<Tuple2<String, String>>builder()
                .setBootstrapServers(brokers)
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(name)
                .setKafkaProducerConfig(producer)
                .setRecordSerializer(new KeyValue(output))
                .build();

        // Event time is the Kafka record timestamp (the source attaches it); no assigner needed.
        env.fromSource(source, WatermarkStrategy.<String>forMonotonousTimestamps(), "kafka")
                .keyBy(key -> key)
                .window(TumblingEventTimeWindows.of(Duration.ofMillis(windowMs)))
                .aggregate(new Count(), new Format())
                .sinkTo(sink);
        env.execute(name);
    }

    /** RocksDB with incremental checkpoints, and where to restore from, as the properties ask. */
    static Configuration stateConfig() {
        Configuration config = new Configuration();
        String checkpoints = System.getProperty("weir.bench.checkpoints");
        if (checkpoints != null) {
            config.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
            config.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
            config.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + checkpoints);
            config.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                    ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        }
        String restore = System.getProperty("weir.bench.restore");
        if (restore != null) {
            config.set(StateRecoveryOptions.SAVEPOINT_PATH, restore);
        }
        return config;
    }

    /** The record key as a string; the value is not needed to count. */
    static final class KeyOnly implements KafkaRecordDeserializationSchema<String> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<String> out) {
            byte[] key = record.key();
            out.collect(key == null ? "" : new String(key, StandardCharsets.UTF_8));
        }

        @Override
        public TypeInformation<String> getProducedType() {
            return Types.STRING;
        }
    }

    static final class Count implements AggregateFunction<String, Long, Long> {
        public Long createAccumulator() { return 0L; }
        public Long add(String key, Long acc) { return acc + 1; }
        public Long getResult(Long acc) { return acc; }
        public Long merge(Long a, Long b) { return a + b; }
    }

    /** (key, JSON) exactly as window-count writes it. Keys are plain ASCII here. */
    static final class Format extends ProcessWindowFunction<Long, Tuple2<String, String>, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Long> counts, Collector<Tuple2<String, String>> out) {
            long count = counts.iterator().next();
            TimeWindow w = ctx.window();
            out.collect(Tuple2.of(key, "{\"key\":\"" + key + "\",\"window_start\":" + w.getStart()
                    + ",\"window_end\":" + w.getEnd() + ",\"count\":" + count + "}"));
        }
    }

    /** Key and value as UTF-8; the record timestamp is the window's max timestamp (end - 1). */
    static final class KeyValue implements KafkaRecordSerializationSchema<Tuple2<String, String>> {
        private final String topic;

        KeyValue(String topic) { this.topic = topic; }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(Tuple2<String, String> kv, KafkaSinkContext ctx, Long timestamp) {
            return new ProducerRecord<>(topic, null, timestamp, kv.f0.getBytes(StandardCharsets.UTF_8),
                    kv.f1.getBytes(StandardCharsets.UTF_8));
        }
    }
}
