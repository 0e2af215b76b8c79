package groups

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Records of __consumer_offsets, in Apache Kafka's formats so that its
// tools can read the topic: the key's leading int16 says what it is.
//   - OffsetCommitKey v1 (group, topic, partition) → OffsetCommitValue v3
//     (offset, leader epoch, metadata, commit timestamp);
//   - GroupMetadataKey v2 (group) → GroupMetadataValue v3 (protocol type,
//     generation, protocol, leader, state timestamp, members with their
//     subscriptions and assignments).
//
// A nil value is a tombstone.
const (
	offsetKeyVersion   = 1
	groupKeyVersion    = 2
	offsetValueVersion = 3
	groupValueVersion  = 3
)

type tp struct {
	topic     string
	partition int32
}

func offsetKey(group string, t tp) []byte {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: group, Topic: t.topic, Partition: t.partition}
	return k.AppendTo(nil)
}

func offsetValue(o offset) []byte {
	v := kmsg.OffsetCommitValue{Version: offsetValueVersion, Offset: o.offset, LeaderEpoch: o.epoch, Metadata: o.metadata, CommitTimestamp: o.commitMs}
	return v.AppendTo(nil)
}

func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

func groupValue(g *group) []byte {
	v := kmsg.GroupMetadataValue{Version: groupValueVersion, ProtocolType: g.protocolType, Generation: g.generation, CurrentStateTimestamp: g.stateMs}
	if g.protocol != "" {
		v.Protocol = &g.protocol
	}
	if g.leader != "" {
		v.Leader = &g.leader
	}
	for _, m := range g.sortedMembers() {
		gm := kmsg.NewGroupMetadataValueMember()
		gm.MemberID, gm.InstanceID, gm.ClientID, gm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
		gm.RebalanceTimeoutMillis, gm.SessionTimeoutMillis = m.rebalanceTimeoutMs, m.sessionTimeoutMs
		gm.Subscription, gm.Assignment = m.metadata(g.protocol), m.assignment
		v.Members = append(v.Members, gm)
	}
	return v.AppendTo(nil)
}

// decoded is one record of the topic.
type decoded struct {
	group  string
	isTP   bool // an offset commit; otherwise group metadata
	tp     tp
	offset *kmsg.OffsetCommitValue  // nil: tombstone
	meta   *kmsg.GroupMetadataValue // nil: tombstone
}

func decodeRecord(key, value []byte) (decoded, error) {
	if len(key) < 2 {
		return decoded{}, fmt.Errorf("key of %d bytes", len(key))
	}
	switch v := int16(binary.BigEndian.Uint16(key)); v {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(key); err != nil {
			return decoded{}, fmt.Errorf("offset commit key: %w", err)
		}
		d := decoded{group: k.Group, isTP: true, tp: tp{k.Topic, k.Partition}}
		if value != nil {
			d.offset = new(kmsg.OffsetCommitValue)
			if err := d.offset.ReadFrom(value); err != nil {
				return decoded{}, fmt.Errorf("offset commit value: %w", err)
			}
			if d.offset.Version < 3 {
				d.offset.LeaderEpoch = -1
			}
		}
		return d, nil
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil {
			return decoded{}, fmt.Errorf("group metadata key: %w", err)
		}
		d := decoded{group: k.Group}
		if value != nil {
			d.meta = new(kmsg.GroupMetadataValue)
			if err := d.meta.ReadFrom(value); err != nil {
				return decoded{}, fmt.Errorf("group metadata value: %w", err)
			}
		}
		return d, nil
	default:
		return decoded{}, fmt.Errorf("unknown key version %d", v)
	}
}
