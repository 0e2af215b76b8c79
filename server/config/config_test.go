package config

import "testing"

func TestParseThrottledReplicas(t *testing.T) {
	for _, tc := range []struct {
		in     string
		ok     bool
		has    [][2]int32
		hasNot [][2]int32
	}{
		{"", true, nil, [][2]int32{{0, 1}}},
		{"*", true, [][2]int32{{0, 1}, {7, 3}}, nil},
		{"0:4", true, [][2]int32{{0, 4}}, [][2]int32{{1, 4}, {0, 3}}},
		{"[0:4, 2:1]", true, [][2]int32{{0, 4}, {2, 1}}, [][2]int32{{2, 4}}},
		{"0-4", false, nil, nil},
		{"0:", false, nil, nil},
		{"a:1", false, nil, nil},
		{"-1:2", false, nil, nil},
		{"0:1,*", false, nil, nil},
	} {
		s, err := ParseThrottled(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		for _, pb := range tc.has {
			if !s.Has(pb[0], pb[1]) {
				t.Errorf("%q does not throttle %d:%d", tc.in, pb[0], pb[1])
			}
		}
		for _, pb := range tc.hasNot {
			if s.Has(pb[0], pb[1]) {
				t.Errorf("%q throttles %d:%d", tc.in, pb[0], pb[1])
			}
		}
		if reason := throttledReplicas(tc.in); (reason == "") != tc.ok {
			t.Errorf("%q: config validation %q", tc.in, reason)
		}
	}
}
