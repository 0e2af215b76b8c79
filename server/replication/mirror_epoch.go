package replication

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-1279's MirrorLeaderEpoch between Tandem brokers. A follower of a
// mirror partition cannot bound the epochs of the batches its leader
// sends by its CurrentLeaderEpoch, as Kafka's follower does since
// KAFKA-18723: mirrored batches keep their source's leader epochs,
// which follow the source's elections, not the destination's. So the
// follower of a mirror partition sends MirrorLeaderEpoch, the latest
// epoch in its leader's log as it last learned it; the leader answers
// with the latest epoch in its log after the read; the follower appends
// only batches up to the epoch it sent and learns the new one for its
// next fetch (a batch of a new source epoch costs one fetch round).
//
// The field is a tagged field of Fetch request and response partitions,
// tag 1279 (the KIP's number), an int32. Kafka's Fetch uses tags 0 to 2
// there and adds them in order, so 1279 does not collide with a future
// Kafka field; the KIP prototype's tags (2 and 3 at version 19) already
// do. A broker that does not know the tag ignores it, as the protocol
// requires: a Tandem leader answers the tag only when the fetch carries
// it.

// mirrorLeaderEpochTag is the tag of MirrorLeaderEpoch.
const mirrorLeaderEpochTag = 1279

// MirrorLeaderEpoch returns the MirrorLeaderEpoch in tags, -1 if absent or
// malformed: the leader's Fetch handler answers a follower that sends it.
func MirrorLeaderEpoch(tags *kmsg.Tags) int32 {
	e := int32(-1)
	tags.Each(func(k uint32, v []byte) {
		if k == mirrorLeaderEpochTag && len(v) == 4 {
			e = int32(binary.BigEndian.Uint32(v))
		}
	})
	return e
}

// SetMirrorLeaderEpoch sets MirrorLeaderEpoch in tags.
func SetMirrorLeaderEpoch(tags *kmsg.Tags, epoch int32) {
	tags.Set(mirrorLeaderEpochTag, kbin.AppendInt32(nil, epoch))
}
