package integration

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// TestShareMetrics: the KIP-932 metrics of docs/metrics.md count what a
// share consumer really did. A member (raw ShareFetch/ShareAcknowledge,
// so that every delivery is known) acquires 10 records, accepts 4,
// rejects 1, releases 5, acquires those 5 again and lets their locks
// expire at the delivery count limit (2), which archives them; a
// ShareAcknowledge with a wrong session epoch fails.
func TestShareMetrics(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), append(groupArgs,
		"--set", "group.share.min.record.lock.duration.ms=1000",
		"--set", "group.share.record.lock.duration.ms=1000",
		"--set", "group.share.delivery.count.limit=2")...)
	const topic, group = "sm", "sm-share"
	tandemtest.CreateTopic(t, p.Addr, topic, 1)
	setShareReset(t, p.Addr, group)
	produceValues(t, p.Addr, topic, 0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cl := tandemtest.Client(t, p.Addr)
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, "m1", []string{topic}
	hbr, err := hb.RequestWith(ctx, cl)
	if err != nil || hbr.ErrorCode != 0 || hbr.Assignment == nil || len(hbr.Assignment.TopicPartitions) != 1 {
		t.Fatalf("ShareGroupHeartbeat: %v %+v", err, hbr)
	}
	id := hbr.Assignment.TopicPartitions[0].TopicID
	fetch := func(epoch int32) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
		t.Helper()
		f := kmsg.NewPtrShareFetchRequest()
		f.GroupID, f.MemberID, f.ShareSessionEpoch = kmsg.StringPtr(group), kmsg.StringPtr("m1"), epoch
		f.MaxWaitMillis, f.MinBytes, f.MaxBytes, f.MaxRecords, f.BatchSize = 1000, 1, 1<<20, 100, 100
		f.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: id, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0, PartitionMaxBytes: 1 << 20}}}}
		fr, err := f.RequestWith(ctx, cl)
		if err != nil || fr.ErrorCode != 0 || len(fr.Topics) != 1 || fr.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("ShareFetch (epoch %d): %v %+v", epoch, err, fr)
		}
		return fr.Topics[0].Partitions[0].AcquiredRecords
	}
	acquired := func(rs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) (n int64) {
		for _, r := range rs {
			n += r.LastOffset - r.FirstOffset + 1
		}
		return n
	}
	if got := acquired(fetch(0)); got != 10 {
		t.Fatalf("first ShareFetch acquired %d records, want 10", got)
	}
	ack := func(epoch int32, batches ...kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareAcknowledgeResponse {
		t.Helper()
		a := kmsg.NewPtrShareAcknowledgeRequest()
		a.GroupID, a.MemberID, a.ShareSessionEpoch = kmsg.StringPtr(group), kmsg.StringPtr("m1"), epoch
		a.Topics = []kmsg.ShareAcknowledgeRequestTopic{{TopicID: id, Partitions: []kmsg.ShareAcknowledgeRequestTopicPartition{{Partition: 0, AcknowledgementBatches: batches}}}}
		ar, err := a.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("ShareAcknowledge: %v", err)
		}
		return ar
	}
	batch := func(first, last int64, typ int8) kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
		return kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{FirstOffset: first, LastOffset: last, AcknowledgeTypes: []int8{typ}}
	}
	if ar := ack(1, batch(0, 3, 1), batch(4, 4, 3), batch(5, 9, 2)); ar.ErrorCode != 0 || ar.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("ShareAcknowledge: %+v", ar)
	}
	if ar := ack(7, batch(5, 5, 1)); ar.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("ShareAcknowledge with a wrong epoch: error %d, want INVALID_SHARE_SESSION_EPOCH", ar.ErrorCode)
	}
	if got := acquired(fetch(2)); got != 5 {
		t.Fatalf("second ShareFetch acquired %d records, want the 5 released", got)
	}

	want := []string{
		`tandem_share_groups{state="Stable"} 1`,
		`tandem_share_groups{state="Empty"} 0`,
		`tandem_share_groups{state="Dead"} 0`,
		`tandem_share_partitions 1`,
		`tandem_share_sessions 1`,
		`tandem_share_fetch_requests_total 2`,
		`tandem_share_fetch_errors_total 0`,
		`tandem_share_acknowledge_requests_total 2`,
		`tandem_share_acknowledge_errors_total 1`,
		`tandem_share_acknowledged_records_total{ack_type="accept"} 4`,
		`tandem_share_acknowledged_records_total{ack_type="reject"} 1`,
		`tandem_share_acknowledged_records_total{ack_type="release"} 5`,
		`tandem_share_acknowledged_records_total{ack_type="renew"} 0`,
		`tandem_share_acquired_records_total 15`,
		`tandem_share_lock_expired_records_total 5`,
		`tandem_share_delivery_limit_archived_records_total 5`,
		`tandem_share_state_writes_total 2`,
		`tandem_share_partition_load_seconds_count 1`,
	}
	var text string
	missing := func() []string {
		text = scrape(t, p.HTTPAddr)
		var out []string
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w) + `$`).MatchString(text) {
				out = append(out, w)
			}
		}
		return out
	}
	// The locks expire a second after the second fetch.
	wait.Until(t, 15*time.Second, func() error {
		if m := missing(); len(m) > 0 {
			return fmt.Errorf("/metrics lacks %q:\n%s", m, grepShare(text))
		}
		return nil
	})
	// The archived records end the share-partition: its start is the log
	// end.
	if got := shareStarts(t, p.Addr, group); got != 10 {
		t.Fatalf("start offset %d after every record was accepted, rejected or archived, want 10", got)
	}
}

func grepShare(text string) string {
	var out string
	for _, l := range regexp.MustCompile(`(?m)^tandem_share_.*$`).FindAllString(text, -1) {
		out += l + "\n"
	}
	return out
}
