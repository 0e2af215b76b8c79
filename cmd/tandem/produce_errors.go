package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceMessages keeps the error messages of Produce responses, which
// franz-go's producer drops (it keeps the code alone): `tandem produce`
// to a read-only mirror topic said only "POLICY_VIOLATION: Request
// parameters do not satisfy the configured policy." where the broker
// had said which mirror writes it. Its connections note the version of
// each Produce request as it is written and decode the answers as they
// are read; nothing is changed on the way.
type produceMessages struct {
	mu   sync.Mutex
	msgs map[string]string // "topic/partition" → the broker's message
}

// of is the broker's message for a partition, "" if none.
func (pm *produceMessages) of(topic string, partition int32) string {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if m, ok := pm.msgs[fmt.Sprintf("%s/%d", topic, partition)]; ok {
		return m
	}
	return pm.msgs[fmt.Sprintf("*/%d", partition)]
}

// opts are the client options that dial through the recording
// connection: TLS (from the flags, read once they are parsed) is done
// here, so kgo's own DialTLSConfig is cleared.
func (pm *produceMessages) opts(c *cli.ClientFlags) []kgo.Opt {
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		if tc, err := c.TLSConfig(); err != nil || tc != nil {
			if err != nil {
				conn.Close()
				return nil, err
			}
			if tc.ServerName == "" {
				tc.ServerName, _, _ = net.SplitHostPort(host)
			}
			tconn := tls.Client(conn, tc)
			if err := tconn.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			conn = tconn
		}
		return &recordingConn{Conn: conn, pm: pm, versions: map[int32]int16{}}, nil
	}
	return []kgo.Opt{kgo.DialTLSConfig(nil), kgo.Dialer(dial)}
}

// recordingConn is a client connection that records Produce answers'
// error messages in pm. franz-go writes each request with one Write.
type recordingConn struct {
	net.Conn
	pm       *produceMessages
	mu       sync.Mutex
	versions map[int32]int16 // correlation ID → Produce version
	read     []byte          // response bytes not yet a whole frame
	lost     bool            // the framing was lost: record nothing
}

func (c *recordingConn) Write(p []byte) (int, error) {
	// size, key, version, correlation ID
	if len(p) >= 12 && int16(binary.BigEndian.Uint16(p[4:])) == kmsg.Produce.Int16() {
		c.mu.Lock()
		c.versions[int32(binary.BigEndian.Uint32(p[8:]))] = int16(binary.BigEndian.Uint16(p[6:]))
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return n, err
	}
	// Every answer is framed, Produce's or not, to find where each
	// starts; the producer's connections carry small answers.
	c.read = append(c.read, p[:n]...)
	for len(c.read) >= 8 {
		size := int(binary.BigEndian.Uint32(c.read))
		if size > 1<<26 {
			c.lost, c.read = true, nil // not a frame: record nothing more
			break
		}
		if len(c.read) < 4+size {
			break
		}
		c.record(c.read[4 : 4+size])
		c.read = c.read[4+size:]
	}
	return n, err
}

// record decodes one response frame if it answers a Produce request.
func (c *recordingConn) record(frame []byte) {
	corr := int32(binary.BigEndian.Uint32(frame))
	version, ok := c.versions[corr]
	if !ok {
		return
	}
	delete(c.versions, corr)
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = version
	body := frame[4:]
	if resp.IsFlexible() { // the response header's tagged fields
		r := kbin.Reader{Src: body}
		for n := r.Uvarint(); n > 0; n-- {
			r.Uvarint()
			r.Span(int(r.Uvarint()))
		}
		body = r.Src
	}
	if err := resp.ReadFrom(bytes.Clone(body)); err != nil {
		return
	}
	c.pm.mu.Lock()
	defer c.pm.mu.Unlock()
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 && p.ErrorMessage != nil && *p.ErrorMessage != "" {
				if c.pm.msgs == nil {
					c.pm.msgs = map[string]string{}
				}
				// From v13 topics are named by ID: the command writes
				// one topic, so the partition says which.
				c.pm.msgs[fmt.Sprintf("%s/%d", t.Topic, p.Partition)] = *p.ErrorMessage
				c.pm.msgs[fmt.Sprintf("*/%d", p.Partition)] = *p.ErrorMessage
			}
		}
	}
}
