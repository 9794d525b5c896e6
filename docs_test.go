package omasandbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs back each promise with the test that proves it, by name; a test
// renamed or removed must not leave a promise pointing at nothing.
func TestDocsNameOnlyTestsThatExist(t *testing.T) {
	declared := map[string]bool{}
	funcDecl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Z]\w*)\(`)
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range funcDecl.FindAllSubmatch(src, -1) {
			declared[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(declared) < 100 {
		t.Fatalf("found only %d test functions: the walk is wrong", len(declared))
	}

	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md")
	// `TestX` names one test; `TestX*` the tests whose names begin so.
	named := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Z]\\w*)(\\*?)`")
	checked := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(text), -1) {
			name, prefix := m[1], m[2] == "*"
			if name == "TestName" {
				continue // security.md's "`package` `TestName`" says how rows read
			}
			checked++
			if !exists(declared, name, prefix) {
				t.Errorf("%s names %s, which no _test.go file declares", doc, m[0])
			}
		}
	}
	if checked < 100 {
		t.Fatalf("the docs name only %d tests: the pattern is wrong", checked)
	}
}

func exists(declared map[string]bool, name string, prefix bool) bool {
	if !prefix {
		return declared[name]
	}
	for d := range declared {
		if strings.HasPrefix(d, name) {
			return true
		}
	}
	return false
}
