package properties

import (
	"reflect"
	"strings"
	"testing"
)

func TestReadProperties(t *testing.T) {
	in := `# a comment
! another comment
   auto.create.topics.enable = false
num.partitions=6
listeners=PLAINTEXT://127.0.0.1:9093
log.retention.ms : 1000
long.value=a,\
    b,\
    c
path=C:\\dir\\
empty=
`
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"auto.create.topics.enable": "false",
		"num.partitions":            "6",
		"listeners":                 "PLAINTEXT://127.0.0.1:9093",
		"log.retention.ms":          "1000",
		"long.value":                "a,b,c",
		"path":                      `C:\\dir\\`,
		"empty":                     "",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	if _, err := Read(strings.NewReader("ok=1\nnot a pair\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want an error naming line 2, got %v", err)
	}
}
