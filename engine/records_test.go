package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/segfile"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// TestRecordsSendfile reads records from files on disk into a loopback
// TCP connection: the bytes go through sendfile (not a copy), are those
// Fetch returns, and stay readable after retention deleted their segment
// while the read was pending.
func TestRecordsSendfile(t *testing.T) {
	dir := t.TempDir()
	e := openTest(t, vfs.Default, func(c *Config) { c.Dir = dir })
	cfg := DefaultLogConfig()
	cfg.SegmentBytes = 1500
	cfg.RetentionMs = -1
	p := mkPart(t, e, cfg)
	for i := range 20 {
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv(fmt.Sprint(i), string(bytes.Repeat([]byte{'x'}, 200)))))
	}
	want := bytes.Join(fetchAll(t, p, 0), nil)
	_, recs, err := p.FetchRecords(0, 1<<20, ReadUncommitted)
	if err != nil || recs.Len() != len(want) || len(recs.chunks) < 2 {
		t.Fatalf("records of %d bytes in %d chunks (%v), want %d bytes over several segments", recs.Len(), len(recs.chunks), err, len(want))
	}
	// The segments go while the records wait to be written.
	if _, err := p.DeleteRecords(p.Offsets().HighWatermark); err != nil {
		t.Fatal(err)
	}
	if err := e.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	server, client := tcpPair(t)
	c := recs.chunks[0]
	if _, handled, err := segfile.SendFile(io.Discard, c.f, c.off, c.n); handled || err != nil {
		t.Fatalf("sendfile to a non-socket: handled %v, %v", handled, err)
	}
	done := make(chan error, 1)
	go func() {
		// The first chunk by hand, to see that sendfile took it.
		n, handled, err := segfile.SendFile(server, c.f, c.off, c.n)
		if err == nil && (!handled || n != c.n) {
			err = fmt.Errorf("sendfile: handled %v, %d of %d bytes", handled, n, c.n)
		}
		if err == nil {
			rest := &Records{e: e, chunks: recs.chunks[1:]}
			_, err = rest.WriteTo(server)
		}
		recs.Close()
		done <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes sent differ from the batches fetched")
	}
	// The deleted segments' descriptors went with the records.
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); strings.HasPrefix(target, e.cfg.Dir) && strings.HasSuffix(target, "(deleted)") {
			t.Fatalf("a deleted segment is still open: %s", target)
		}
	}
}

// TestRecordsCutShort truncates the log under records not yet written:
// the write fails rather than send fewer bytes than the frame announced.
func TestRecordsCutShort(t *testing.T) {
	e := openTest(t, vfs.Default, func(c *Config) { c.Dir = t.TempDir() })
	p := mkPart(t, e, DefaultLogConfig())
	for i := range 5 {
		appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv(fmt.Sprint(i), "v")))
	}
	_, recs, err := p.FetchRecords(0, 1<<20, ReadUncommitted)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Close()
	if err := p.Truncate(2); err != nil {
		t.Fatal(err)
	}
	server, client := tcpPair(t)
	go io.Copy(io.Discard, client)
	if _, err := recs.WriteTo(server); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("write of records cut short: %v", err)
	}
}
