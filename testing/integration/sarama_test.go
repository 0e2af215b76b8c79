package integration

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestSarama produces 100,000 records with sarama's AsyncProducer
// (acks=WaitForAll, hash partitioner) and reads them back with sarama's
// partition consumers.
func TestSarama(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir())
	const topic = "sarama"
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "tandem-it-sarama"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Flush.Bytes = 256 << 10
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Net.MaxOpenRequests = 1 // keeps each partition in order across retries
	cfg.Consumer.Fetch.Default = 4 << 20

	prod, err := sarama.NewAsyncProducer([]string{p.Addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range numRecords {
			key, value, headers := genRecord(i)
			var hs []sarama.RecordHeader
			for _, h := range headers {
				hs = append(hs, sarama.RecordHeader{Key: h[0], Value: h[1]})
			}
			prod.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key),
				Value: sarama.ByteEncoder(value), Headers: hs, Metadata: i}
		}
	}()
	acked := make([]pos, numRecords)
	perPartition := make(map[int32]int64)
	timeout := time.After(2 * time.Minute)
	for done := 0; done < numRecords; done++ {
		select {
		case m := <-prod.Successes():
			acked[m.Metadata.(int)] = pos{m.Partition, m.Offset}
			perPartition[m.Partition]++
		case err := <-prod.Errors():
			t.Fatalf("producing: %v", err)
		case <-timeout:
			t.Fatalf("only %d of %d records acknowledged after 2 minutes", done, numRecords)
		}
	}
	if err := prod.Close(); err != nil {
		t.Fatal(err)
	}

	cons, err := sarama.NewConsumer([]string{p.Addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	v := newVerifier(numRecords, true, acked)
	for part, n := range perPartition {
		pc, err := cons.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("consuming partition %d: %v", part, err)
		}
		for got := int64(0); got < n; got++ {
			select {
			case m := <-pc.Messages():
				var hs [][2][]byte
				for _, h := range m.Headers {
					hs = append(hs, [2][]byte{h.Key, h.Value})
				}
				v.add(m.Partition, m.Offset, m.Key, m.Value, hs)
			case err := <-pc.Errors():
				t.Fatalf("consuming partition %d: %v", part, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("partition %d: no message for 30s after %d of %d", part, got, n)
			}
		}
		pc.Close()
	}
	v.finish(t, endOffsets(t, p.Addr, topic))
}
