package server

import (
	"errors"
	"testing"

	"github.com/IBM/sarama"
)

// TestSaramaAdmin drives the admin APIs with sarama's ClusterAdmin, which
// picks other request versions than franz-go.
func TestSaramaAdmin(t *testing.T) {
	b := startBroker(t, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	adm, err := sarama.NewClusterAdmin([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })

	retention := "3600000"
	err = adm.CreateTopic("sarama", &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CreateTopic("sarama", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	bad := "-7"
	err = adm.CreateTopic("sarama-bad", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &bad}}, false)
	if !errors.Is(err, sarama.ErrInvalidConfig) {
		t.Fatalf("bad config: %v", err)
	}
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama", ConfigNames: []string{"retention.ms"}})
	if err != nil || len(entries) != 1 || entries[0].Value != retention || entries[0].Source != sarama.SourceTopic {
		t.Fatalf("describe: %v %+v", err, entries)
	}
	compact := "compact"
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, "sarama", map[string]sarama.IncrementalAlterConfigsEntry{
		"cleanup.policy": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &compact},
	}, false); err != nil {
		t.Fatal(err)
	}
	if err := adm.CreatePartitions("sarama", 4, nil, false); err != nil {
		t.Fatal(err)
	}
	topics, err := adm.DescribeTopics([]string{"sarama"})
	if err != nil || len(topics) != 1 || len(topics[0].Partitions) != 4 {
		t.Fatalf("describe topics: %v %+v", err, topics)
	}
	if err := adm.DeleteRecords("sarama", map[int32]int64{0: 0}); !errors.Is(err, sarama.ErrPolicyViolation) {
		t.Fatalf("delete records on a compacted topic: %v", err)
	}
	if err := adm.DeleteTopic("sarama"); err != nil {
		t.Fatal(err)
	}
	if err := adm.DeleteTopic("sarama"); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Fatalf("delete twice: %v", err)
	}
}
