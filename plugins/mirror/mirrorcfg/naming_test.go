package mirrorcfg

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestTopicPrefix(t *testing.T) {
	base := map[string]string{"bootstrap.servers": "127.0.0.1:9092"}
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true}, {"a.", true}, {"edge-1_", true}, {"A.b.", true},
		{"a/", false}, {"a b.", false}, {"__a.", false}, {"é.", false}, {strings.Repeat("x", 201), false},
	} {
		c := map[string]string{"bootstrap.servers": base["bootstrap.servers"], TopicPrefix: tc.prefix}
		err := Validate(c)
		if ok := err == nil; ok != tc.ok {
			t.Errorf("prefix %q: %v, want ok=%v", tc.prefix, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), TopicPrefix)) {
			t.Errorf("prefix %q: %v, want INVALID_CONFIG naming the key", tc.prefix, err)
		}
	}
	if got := DestName(map[string]string{TopicPrefix: "b."}, "orders"); got != "b.orders" {
		t.Errorf("DestName with prefix b.: %q", got)
	}
	if got := DestName(base, "orders"); got != "orders" {
		t.Errorf("DestName without a prefix: %q", got)
	}
	if err := PrefixChange(map[string]string{TopicPrefix: "a."}, map[string]string{TopicPrefix: "a.", "x": "y"}); err != nil {
		t.Errorf("an alter that keeps the prefix: %v", err)
	}
	for _, next := range []map[string]string{{TopicPrefix: "b."}, {}} {
		if err := PrefixChange(map[string]string{TopicPrefix: "a."}, next); err == nil {
			t.Errorf("prefix a. altered to %v: accepted", next)
		}
	}
	if err := PrefixChange(base, map[string]string{TopicPrefix: "a."}); err == nil {
		t.Error("a prefix set on a mirror created without one: accepted")
	}
}
