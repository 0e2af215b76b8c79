package server_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// v8Topic is one topic of a CreateTopics v8 request as the test writes
// it; mirrorID nil is a null MirrorInfo.
type v8Topic struct {
	name       string
	partitions int32
	rf         int16
	assign     [][]int32
	mirrorID   *uuid.UUID
}

// createTopicsV8 encodes a CreateTopics v8 body (KIP-1279's MirrorInfo
// after each topic's configs), which franz-go cannot.
func createTopicsV8(topics ...v8Topic) []byte {
	b := kbin.AppendCompactArrayLen(nil, len(topics))
	for _, t := range topics {
		b = kbin.AppendCompactString(b, t.name)
		b = kbin.AppendInt32(b, t.partitions)
		b = kbin.AppendInt16(b, t.rf)
		b = kbin.AppendCompactArrayLen(b, len(t.assign))
		for i, replicas := range t.assign {
			b = kbin.AppendInt32(b, int32(i))
			b = kbin.AppendCompactArrayLen(b, len(replicas))
			for _, r := range replicas {
				b = kbin.AppendInt32(b, r)
			}
			b = append(b, 0) // tags
		}
		b = kbin.AppendCompactArrayLen(b, 1) // one config
		b = kbin.AppendCompactString(b, "retention.ms")
		b = kbin.AppendCompactNullableString(b, kmsg.StringPtr("3600000"))
		b = append(b, 0)
		if t.mirrorID == nil {
			b = kbin.AppendInt8(b, -1)
		} else {
			b = kbin.AppendInt8(b, 1)
			b = kbin.AppendUuid(b, *t.mirrorID)
			b = append(b, 0)
		}
		b = append(b, 0)
	}
	b = kbin.AppendInt32(b, 10000)
	b = kbin.AppendBool(b, false)
	return append(b, 0)
}

func sendCreateTopicsV8(t *testing.T, addr string, topics ...v8Topic) *kmsg.CreateTopicsResponse {
	t.Helper()
	c := tandemtest.Dial(t, addr)
	if _, err := c.Write(tandemtest.Frame(19, 8, 1, true, createTopicsV8(topics...))); err != nil {
		t.Fatal(err)
	}
	body, err := c.ReadFrame()
	if err != nil {
		t.Fatalf("CreateTopics v8: %v", err)
	}
	resp := &kmsg.CreateTopicsResponse{Version: 8}
	if err := resp.ReadFrom(body[5:]); err != nil { // correlation ID, empty header tags
		t.Fatalf("CreateTopics v8 response: %v", err)
	}
	return resp
}

// TestCreateTopicsMirrorInfo covers CreateTopics v8 (KIP-1279): a topic
// with MirrorInfo gets the source topic ID; an ID in use is refused; a
// manual assignment naming a broker that is not active is refused with
// MirrorInfo (accepted without); a null MirrorInfo gets a fresh ID; a
// truncated body closes the connection, nothing is created.
func TestCreateTopicsMirrorInfo(t *testing.T) {
	t.Parallel() // its own cluster, data dirs and ports
	c := tandemtest.StartCluster(t, 3, nil)
	addr := c.Broker(1).Addr
	c.WaitFor("three brokers", func(img *metadata.Image) bool { return len(img.Brokers) == 3 })
	id := uuid.Random()
	resp := sendCreateTopicsV8(t, addr, v8Topic{name: "mirrored", partitions: 2, rf: 3, mirrorID: &id}, v8Topic{name: "plain", partitions: 1, rf: 1})
	if len(resp.Topics) != 2 || resp.Topics[0].ErrorCode != 0 || resp.Topics[1].ErrorCode != 0 {
		t.Fatalf("CreateTopics v8: %+v", resp.Topics)
	}
	if resp.Topics[0].TopicID != id || resp.Topics[1].TopicID == id || resp.Topics[1].TopicID == ([16]byte{}) {
		t.Fatalf("topic IDs %v and %v, want %v for the mirrored one and a fresh one for the other", resp.Topics[0].TopicID, resp.Topics[1].TopicID, id)
	}
	c.WaitFor("the topics", func(img *metadata.Image) bool { return img.Topics["mirrored"] != nil && img.Topics["plain"] != nil })
	if got := c.Image().Topics["mirrored"]; got.ID != id || got.Configs["retention.ms"] != "3600000" || len(got.Partitions) != 2 {
		t.Fatalf("mirrored topic in the image: %+v", got)
	}

	// The same source ID for another name.
	resp = sendCreateTopicsV8(t, addr, v8Topic{name: "again", partitions: 1, rf: 1, mirrorID: &id})
	if resp.Topics[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("a MirrorInfo ID in use: error %d, want INVALID_REQUEST", resp.Topics[0].ErrorCode)
	}

	// A broker that is not active: refused with MirrorInfo only.
	c.Broker(3).Kill()
	c.WaitFor("broker 3 fenced", func(img *metadata.Image) bool { return !img.Brokers[3].Live() })
	other := uuid.Random()
	resp = sendCreateTopicsV8(t, addr, v8Topic{name: "onfenced", partitions: -1, rf: -1, assign: [][]int32{{1, 3}}, mirrorID: &other})
	if resp.Topics[0].ErrorCode != kerr.InvalidReplicaAssignment.Code {
		t.Fatalf("MirrorInfo with a replica on a fenced broker: error %d, want INVALID_REPLICA_ASSIGNMENT", resp.Topics[0].ErrorCode)
	}
	resp = sendCreateTopicsV8(t, addr, v8Topic{name: "onfenced", partitions: -1, rf: -1, assign: [][]int32{{1, 3}}})
	if resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("no MirrorInfo, a replica on a fenced broker: error %d, want none: only MirrorInfo asks for active brokers", resp.Topics[0].ErrorCode)
	}

	// A body cut short is refused as a whole.
	conn := tandemtest.Dial(t, addr)
	body := createTopicsV8(v8Topic{name: "cut", partitions: 1, rf: 1, mirrorID: &other})
	if _, err := conn.Write(tandemtest.Frame(19, 8, 1, true, body[:len(body)-8])); err != nil {
		t.Fatal(err)
	}
	if err := conn.ExpectClosed(5 * time.Second); err != nil {
		t.Fatalf("a truncated CreateTopics v8: %v", err)
	}
	if c.Image().Topics["cut"] != nil {
		t.Fatal("a truncated CreateTopics v8 created its topic")
	}
}
