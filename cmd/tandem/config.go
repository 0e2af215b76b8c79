package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseSet parses one --set key=value.
func parseSet(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return "", "", fmt.Errorf("--set %q: want key=value", s)
	}
	return k, strings.TrimSpace(v), nil
}

// listenerAddr turns the first entry of a Kafka listeners value such as
// "PLAINTEXT://127.0.0.1:9092,SSL://..." into "127.0.0.1:9092".
func listenerAddr(v string) string {
	first, _, _ := strings.Cut(v, ",")
	first = strings.TrimSpace(first)
	if _, addr, ok := strings.Cut(first, "://"); ok {
		return addr
	}
	return first
}

// fileKeys are the Kafka keys that map onto serve's flags instead of going
// to the broker's properties. A flag given on the command line wins.
var fileKeys = map[string]string{
	"node.id":              "node-id",
	"broker.id":            "node-id",
	"log.dirs":             "data-dir",
	"log.dir":              "data-dir",
	"listeners":            "listen",
	"advertised.listeners": "advertise",
}

// applyFileKeys moves the keys of fileKeys out of props into the options,
// except for the flags in explicit (given on the command line).
func applyFileKeys(props map[string]string, o *serveOptions, explicit map[string]bool) error {
	for key, flagName := range fileKeys {
		v, ok := props[key]
		if !ok || (flagName == "listen" || flagName == "advertise") && namedListeners(props) {
			continue
		}
		delete(props, key)
		if explicit[flagName] {
			continue
		}
		switch flagName {
		case "node-id":
			id, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return fmt.Errorf("%s=%q: %w", key, v, err)
			}
			o.nodeID = int(id)
		case "data-dir":
			dir, _, _ := strings.Cut(v, ",") // one data dir per broker
			o.dataDir = strings.TrimSpace(dir)
		case "listen":
			o.listen = listenerAddr(v)
		case "advertise":
			o.advertise = listenerAddr(v)
		}
	}
	return nil
}

// namedListeners reports whether listeners is more than one PLAINTEXT
// address: several listeners, or a TLS or SASL one. Then listeners and
// advertised.listeners stay broker properties (the server builds the
// listeners from them) instead of becoming --listen and --advertise.
func namedListeners(props map[string]string) bool {
	v := strings.TrimSpace(props["listeners"])
	name, _, _ := strings.Cut(v, "://")
	return strings.Contains(v, ",") || strings.Contains(v, "://") && !strings.EqualFold(name, "PLAINTEXT")
}
