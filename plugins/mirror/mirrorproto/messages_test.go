package mirrorproto

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var update = flag.Bool("update", false, "rewrite testdata/messages.golden from the current encoding")

// TestMessagesGolden pins the bytes of every mirror message, on the wire
// and as stored, to testdata/messages.golden: each sample message (every
// field set) and each empty one (every field zero, no tagged field
// written) encodes to exactly the bytes recorded there, and those bytes
// decode back to a message that encodes to them again. Run with -update
// only after a deliberate change of the wire format.
func TestMessagesGolden(t *testing.T) {
	type message interface {
		Key() int16
		AppendTo([]byte) []byte
		ReadFrom([]byte) error
	}
	var msgs []message
	reqs, resps := sampleMessages()
	for _, r := range reqs {
		msgs = append(msgs, r)
	}
	for _, r := range resps {
		msgs = append(msgs, r)
	}
	for k := KeyCreateMirror; k <= KeyBumpLeaderEpochs; k++ {
		req := NewRequest(k)
		msgs = append(msgs, req, req.ResponseKind())
	}
	var got strings.Builder
	for i, m := range msgs {
		b := m.AppendTo(nil)
		fmt.Fprintf(&got, "%d %d %T %x\n", i, m.Key(), m, b)
		var fresh message
		if req, ok := m.(kmsg.Request); ok {
			fresh = NewRequest(req.Key())
		} else {
			fresh = m.(kmsg.Response).RequestKind().ResponseKind()
		}
		if err := fresh.ReadFrom(b); err != nil {
			t.Fatalf("%T: decode: %v", m, err)
		}
		if again := fresh.AppendTo(nil); string(again) != string(b) {
			t.Errorf("%T: encodes to %x after a round trip, was %x", m, again, b)
		}
	}
	path := filepath.Join("testdata", "messages.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
	sc := bufio.NewScanner(strings.NewReader(got.String()))
	sc.Buffer(nil, 1<<20)
	n := 0
	for ; sc.Scan(); n++ {
		if n >= len(wantLines) {
			t.Fatalf("message %d is not in %s: %s", n, path, sc.Text())
		}
		if sc.Text() != wantLines[n] {
			t.Errorf("message %d encodes differently:\n got %s\nwant %s", n, sc.Text(), wantLines[n])
		}
	}
	if n != len(wantLines) {
		t.Errorf("%d messages encoded, %s has %d", n, path, len(wantLines))
	}
	if _, err := hex.DecodeString(strings.Fields(wantLines[0])[3]); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
