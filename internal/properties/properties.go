// Package properties reads Kafka's .properties files (server.properties,
// a client's --command-config, a data dir's meta.properties).
package properties

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Read reads Kafka's properties format: one key=value (or
// key:value) per line, whitespace around keys and values trimmed, lines
// starting with # or ! ignored, and a line ending in an odd number of
// backslashes continued on the next one. Other Java escapes (\n, \uXXXX)
// are not interpreted: Kafka configs do not need them.
func Read(r io.Reader) (map[string]string, error) {
	props := make(map[string]string)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending strings.Builder
	lineNo, startLine := 0, 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if pending.Len() == 0 {
			if line == "" || line[0] == '#' || line[0] == '!' {
				continue
			}
			startLine = lineNo
		}
		if n := len(line) - len(strings.TrimRight(line, `\`)); n%2 == 1 {
			pending.WriteString(line[:len(line)-1])
			continue
		}
		pending.WriteString(line)
		if err := addProperty(props, pending.String(), startLine); err != nil {
			return nil, err
		}
		pending.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading properties: %w", err)
	}
	if pending.Len() > 0 { // a continuation on the last line
		if err := addProperty(props, pending.String(), startLine); err != nil {
			return nil, err
		}
	}
	return props, nil
}

func addProperty(props map[string]string, line string, lineNo int) error {
	i := strings.IndexAny(line, "=:")
	if i <= 0 {
		return fmt.Errorf("line %d: %q is not key=value", lineNo, line)
	}
	props[strings.TrimSpace(line[:i])] = strings.TrimSpace(line[i+1:])
	return nil
}
