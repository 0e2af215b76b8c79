package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The mirror workloads check that the destination holds the source's
// records byte for byte where it is cheap: a digest of each partition's
// records (offsets, timestamps, keys and values) read from both sides.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// digest is a running checksum of one partition's records in the order a
// consumer reads them.
type digest struct {
	CRC     uint32
	Records int64
}

func (d *digest) add(r *kgo.Record) {
	var b [32]byte
	binary.BigEndian.PutUint64(b[:], uint64(r.Offset))
	binary.BigEndian.PutUint64(b[8:], uint64(r.Timestamp.UnixMilli()))
	binary.BigEndian.PutUint64(b[16:], uint64(len(r.Key)))
	binary.BigEndian.PutUint64(b[24:], uint64(len(r.Value)))
	d.CRC = crc32.Update(d.CRC, castagnoli, b[:])
	d.CRC = crc32.Update(d.CRC, castagnoli, r.Key)
	d.CRC = crc32.Update(d.CRC, castagnoli, r.Value)
	d.Records++
}

func (c *consumer) digestOf(p int32) *digest {
	d, ok := c.digests[p]
	if !ok {
		d = &digest{}
		c.digests[p] = d
	}
	return d
}

// topicDigests reads topic on addr from the start until it has read
// records records, and returns each partition's digest.
func topicDigests(ctx context.Context, addr, topic string, records int64) (map[int32]digest, error) {
	c, err := newConsumer(addr, topic, false)
	if err != nil {
		return nil, err
	}
	defer c.close()
	c.withDigests().want(records)
	if err := c.run(ctx); err != nil {
		return nil, fmt.Errorf("read %s on %s for its digest: %w", topic, addr, err)
	}
	return c.values(), nil
}

func (c *consumer) values() map[int32]digest {
	out := make(map[int32]digest, len(c.digests))
	for p, d := range c.digests {
		out[p] = *d
	}
	return out
}

// sameRecords compares the digests of a topic on the source and on the
// destination.
func sameRecords(topic string, src, dst map[int32]digest) error {
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(src)) {
		if d, s := dst[p], src[p]; d != s {
			errs = append(errs, fmt.Errorf("%s/%d: destination has %d records (crc %08x), source %d (crc %08x)", topic, p, d.Records, d.CRC, s.Records, s.CRC))
		}
	}
	for p, d := range dst {
		if _, ok := src[p]; !ok {
			errs = append(errs, fmt.Errorf("%s/%d: %d records on the destination, none on the source", topic, p, d.Records))
		}
	}
	return errors.Join(errs...)
}
