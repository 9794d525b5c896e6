// Package glob implements the CMA glob dialect used by the glob and grep
// tools, and the guest side of the glob tool: the enumeration and cleanup
// scripts and the parsers for what they print. It starts no processes.
package glob

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// Limits on a pattern, so that compiling and matching stay cheap for any input.
const (
	MaxPatternBytes = 1024
	MaxBraceDepth   = 4
	MaxAlternatives = 64
	MaxClassBytes   = 256
	MaxStates       = 4096
)

// ErrInvalidPattern is matched (errors.Is) by every error Compile returns.
var ErrInvalidPattern = errors.New("invalid glob pattern")

// PatternError says why a pattern was refused.
type PatternError struct {
	Pattern string
	Reason  string
}

func (e *PatternError) Error() string { return "Invalid glob pattern: " + e.Reason }

// Is reports ErrInvalidPattern as the category of every PatternError.
func (e *PatternError) Is(target error) bool { return target == ErrInvalidPattern }

// Characters are UTF-8 code points: `?` and a class each consume one code
// point. A byte that is not part of valid UTF-8 counts as one character of its
// own, outside the Unicode range, so it matches only itself, `?`, `*` and
// negated classes; matching never fails on such input.
const invalidByteBase = utf8.MaxRune + 1

func decode(s string, i int) (rune, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n <= 1 {
		return invalidByteBase + rune(s[i]), 1
	}
	return r, n
}

type kind uint8

const (
	kLiteral  kind = iota
	kAny           // ?
	kClass         // [...]
	kStar          // *: a run without '/'
	kGlobstar      // **: any run
	kDirs          // **/: zero or more whole directories; two states,
	kDirsMid       // the second one inside a directory name
	kAccept
)

type span struct{ lo, hi rune }

type class struct {
	negated bool
	spans   []span
}

func (c *class) matches(r rune) bool {
	if r == '/' {
		return false
	}
	in := false
	for _, s := range c.spans {
		if s.lo <= r && r <= s.hi {
			in = true
			break
		}
	}
	return in != c.negated
}

type token struct {
	kind  kind
	r     rune
	class *class
}

// node is a token or, when alts is set, a brace group.
type node struct {
	tok  token
	alts [][]node
}

// Pattern is a compiled glob. It is safe for concurrent use.
type Pattern struct {
	source string
	// states holds every expanded alternative one after another, each as a
	// position automaton: state i means "tokens before i have matched", and
	// each alternative ends in a kAccept state.
	states []token
	starts []int32
	// sets recycles Match's two state sets, so that matching allocates
	// nothing in the steady state (a glob matches every enumerated path).
	sets sync.Pool
}

// Compile checks a pattern against the dialect and its limits and compiles
// it. The pattern gets an implicit leading `**/`, so it matches at any depth.
func Compile(pattern string) (*Pattern, error) {
	fail := func(format string, args ...any) (*Pattern, error) {
		return nil, &PatternError{Pattern: pattern, Reason: fmt.Sprintf(format, args...)}
	}
	if pattern == "" {
		return fail("pattern is empty")
	}
	if len(pattern) > MaxPatternBytes {
		return fail("pattern exceeds %d bytes", MaxPatternBytes)
	}
	p := parser{src: pattern}
	tree, err := p.sequence(false)
	if err != nil {
		return fail("%s", err.Error())
	}
	if countAlternatives(tree) > MaxAlternatives {
		return fail("pattern expands to more than %d alternatives", MaxAlternatives)
	}
	c := &Pattern{source: pattern}
	for _, alt := range expand(tree) {
		alt = normalize(alt)
		c.starts = append(c.starts, int32(len(c.states)))
		if len(alt) == 0 || alt[0].kind != kDirs {
			alt = append([]token{{kind: kDirs}}, alt...)
		}
		for _, t := range alt {
			c.states = append(c.states, t)
			if t.kind == kDirs {
				c.states = append(c.states, token{kind: kDirsMid})
			}
		}
		c.states = append(c.states, token{kind: kAccept})
		if len(c.states) > MaxStates {
			return fail("pattern compiles to more than %d states", MaxStates)
		}
	}
	return c, nil
}

// String returns the source pattern.
func (p *Pattern) String() string { return p.source }

// States is the size of the compiled automaton: Match does at most this much
// work per character of its input.
func (p *Pattern) States() int { return len(p.states) }

// Match reports whether rel, a path relative to the search root without a
// leading "./", matches the pattern.
func (p *Pattern) Match(rel string) bool {
	ok, _ := p.match(rel)
	return ok
}

// match also counts state insertions, which bounds the work done. Its two
// state sets live on the stack for patterns of up to stackStates states (so
// matching allocates nothing, which matters: a glob matches every file it
// enumerates), and come from a pool for larger ones.
func (p *Pattern) match(rel string) (bool, int) {
	n := len(p.states)
	if n <= stackStates {
		var buf [4][stackStates]int32
		cur := stateSet{dense: buf[0][:n], sparse: buf[1][:n]}
		next := stateSet{dense: buf[2][:n], sparse: buf[3][:n]}
		return p.run(&cur, &next, rel)
	}
	pair, _ := p.sets.Get().(*[2]stateSet)
	if pair == nil {
		pair = &[2]stateSet{newStateSet(n), newStateSet(n)}
	}
	defer p.sets.Put(pair)
	pair[0].clear()
	return p.run(&pair[0], &pair[1], rel)
}

// stackStates is the largest automaton whose state sets match keeps on the stack.
const stackStates = 64

// run simulates the automaton over rel with two empty state sets.
func (p *Pattern) run(cur, next *stateSet, rel string) (bool, int) {
	steps := 0
	for _, s := range p.starts {
		steps += p.add(cur, s)
	}
	for i := 0; i < len(rel) && cur.n > 0; {
		r, n := decode(rel, i)
		i += n
		next.clear()
		for _, s := range cur.members() {
			t := &p.states[s]
			switch t.kind {
			case kLiteral:
				if r == t.r {
					steps += p.add(next, s+1)
				}
			case kAny:
				if r != '/' {
					steps += p.add(next, s+1)
				}
			case kClass:
				if t.class.matches(r) {
					steps += p.add(next, s+1)
				}
			case kStar:
				if r != '/' {
					steps += p.add(next, s)
				}
			case kGlobstar:
				steps += p.add(next, s)
			case kDirs:
				if r == '/' {
					steps += p.add(next, s)
				} else {
					steps += p.add(next, s+1)
				}
			case kDirsMid:
				if r == '/' {
					steps += p.add(next, s-1)
				} else {
					steps += p.add(next, s)
				}
			}
		}
		cur, next = next, cur
	}
	for _, s := range cur.members() {
		if p.states[s].kind == kAccept {
			return true, steps
		}
	}
	return false, steps
}

// add inserts state s and the states reachable from it without input.
func (p *Pattern) add(set *stateSet, s int32) int {
	n := 0
	for !set.has(s) {
		set.insert(s)
		n++
		switch p.states[s].kind {
		case kStar, kGlobstar:
			s++
		case kDirs:
			s += 2
		default:
			return n
		}
	}
	return n
}

// stateSet is a sparse set: constant-time insert, membership and clear.
// Its slices are never reassigned, so that sets built on the stack stay there.
type stateSet struct {
	dense  []int32
	sparse []int32
	n      int32
}

func newStateSet(n int) stateSet {
	return stateSet{dense: make([]int32, n), sparse: make([]int32, n)}
}

func (s *stateSet) has(x int32) bool {
	i := s.sparse[x]
	return i < s.n && s.dense[i] == x
}

func (s *stateSet) insert(x int32) {
	s.sparse[x] = s.n
	s.dense[s.n] = x
	s.n++
}

func (s *stateSet) members() []int32 { return s.dense[:s.n] }

func (s *stateSet) clear() { s.n = 0 }

type parser struct {
	src   string
	pos   int
	depth int
}

// sequence parses up to the end of the pattern or, inside braces, up to the
// ',' or '}' that ends the current alternative (left for the caller).
func (p *parser) sequence(inBraces bool) ([]node, error) {
	var seq []node
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; c {
		case '\\':
			if p.pos+1 >= len(p.src) {
				return nil, errors.New("trailing escape")
			}
			r, n := decode(p.src, p.pos+1)
			p.pos += 1 + n
			seq = append(seq, node{tok: token{kind: kLiteral, r: r}})
		case '*':
			start := p.pos
			for p.pos < len(p.src) && p.src[p.pos] == '*' {
				p.pos++
			}
			k := kStar
			if p.pos-start > 1 {
				k = kGlobstar
			}
			seq = append(seq, node{tok: token{kind: k}})
		case '?':
			p.pos++
			seq = append(seq, node{tok: token{kind: kAny}})
		case '[':
			cl, err := p.class()
			if err != nil {
				return nil, err
			}
			seq = append(seq, node{tok: token{kind: kClass, class: cl}})
		case ']':
			return nil, errors.New("unmatched ']'")
		case '{':
			alts, err := p.group()
			if err != nil {
				return nil, err
			}
			seq = append(seq, node{alts: alts})
		case '}', ',':
			if inBraces {
				return seq, nil
			}
			if c == '}' {
				return nil, errors.New("unmatched '}'")
			}
			p.pos++
			seq = append(seq, node{tok: token{kind: kLiteral, r: ','}})
		default:
			r, n := decode(p.src, p.pos)
			p.pos += n
			seq = append(seq, node{tok: token{kind: kLiteral, r: r}})
		}
	}
	if inBraces {
		return nil, errors.New("unmatched '{' (missing '}')")
	}
	return seq, nil
}

func (p *parser) group() ([][]node, error) {
	p.depth++
	if p.depth > MaxBraceDepth {
		return nil, fmt.Errorf("braces nested deeper than %d", MaxBraceDepth)
	}
	p.pos++ // '{'
	var alts [][]node
	for {
		alt, err := p.sequence(true)
		if err != nil {
			return nil, err
		}
		if len(alt) == 0 {
			return nil, errors.New("empty alternative in braces")
		}
		alts = append(alts, alt)
		c := p.src[p.pos]
		p.pos++
		if c == '}' {
			break
		}
	}
	if len(alts) < 2 {
		return nil, errors.New("braces need at least two alternatives")
	}
	p.depth--
	return alts, nil
}

type classItem struct {
	r       rune
	escaped bool
}

func (p *parser) class() (*class, error) {
	start := p.pos
	i := start + 1
	cl := &class{}
	if i < len(p.src) && (p.src[i] == '!' || p.src[i] == '^') {
		cl.negated = true
		i++
	}
	var items []classItem
	for {
		if i >= len(p.src) {
			return nil, errors.New("unmatched '[' (missing ']')")
		}
		c := p.src[i]
		if c == ']' {
			break
		}
		if c == '\\' {
			if i+1 >= len(p.src) {
				return nil, errors.New("trailing escape")
			}
			r, n := decode(p.src, i+1)
			items = append(items, classItem{r: r, escaped: true})
			i += 1 + n
			continue
		}
		r, n := decode(p.src, i)
		items = append(items, classItem{r: r})
		i += n
	}
	source := p.src[start : i+1]
	p.pos = i + 1
	if len(source)-2 > MaxClassBytes {
		return nil, fmt.Errorf("character class exceeds %d bytes", MaxClassBytes)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("empty character class %q", source)
	}
	for j := 0; j < len(items); j++ {
		lo := items[j].r
		if j+2 < len(items) && items[j+1].r == '-' && !items[j+1].escaped {
			hi := items[j+2].r
			if lo > hi {
				return nil, fmt.Errorf("descending range in character class %q", source)
			}
			cl.spans = append(cl.spans, span{lo, hi})
			j += 2
			continue
		}
		cl.spans = append(cl.spans, span{lo, lo})
	}
	return cl, nil
}

// countAlternatives counts what brace expansion would produce, saturating
// just above the limit so that no product can overflow.
func countAlternatives(seq []node) int {
	total := 1
	for _, n := range seq {
		if n.alts == nil {
			continue
		}
		sum := 0
		for _, alt := range n.alts {
			sum = min(sum+countAlternatives(alt), MaxAlternatives+1)
		}
		total = min(total*sum, MaxAlternatives+1)
	}
	return total
}

// expand turns braces into separate token sequences, in pattern order.
func expand(seq []node) [][]token {
	out := [][]token{nil}
	for _, n := range seq {
		if n.alts == nil {
			for i := range out {
				out[i] = append(out[i], n.tok)
			}
			continue
		}
		var tails [][]token
		for _, alt := range n.alts {
			tails = append(tails, expand(alt)...)
		}
		grown := make([][]token, 0, len(out)*len(tails))
		for _, head := range out {
			for _, tail := range tails {
				grown = append(grown, append(append([]token(nil), head...), tail...))
			}
		}
		out = grown
	}
	return out
}

// normalize joins star runs that braces split apart (`{a*,b}*` gives `a**`)
// and turns `**` followed by '/' into the directory wildcard, so each
// expansion means what its text would mean.
func normalize(seq []token) []token {
	out := seq[:0:0]
	for i := 0; i < len(seq); i++ {
		t := seq[i]
		if t.kind != kStar && t.kind != kGlobstar {
			out = append(out, t)
			continue
		}
		for i+1 < len(seq) && (seq[i+1].kind == kStar || seq[i+1].kind == kGlobstar) {
			t.kind = kGlobstar
			i++
		}
		if t.kind == kGlobstar && i+1 < len(seq) && seq[i+1].kind == kLiteral && seq[i+1].r == '/' {
			t.kind = kDirs
			i++
		}
		out = append(out, t)
	}
	return out
}

// Narrowing says which files the guest may skip for this pattern, so that
// only files that can match are streamed: the insides of .git directories
// unless the pattern names .git; when the pattern begins with plain
// directory names (no wildcards, classes, braces or escapes), every file not
// under a directory path ending in them (`calc/**/*.py` can only match under
// some `calc/`: the implicit `**/` still lets that be at any depth); and when
// its last segment is plain text and single stars only, every file whose
// base name does not fit that segment as a find -name pattern (where it means
// exactly what the segment means).
func (p *Pattern) Narrowing() Narrowing {
	n := Narrowing{SkipGit: !strings.Contains(p.source, ".git")}
	if strings.ContainsAny(p.source, "{}\\") {
		return n
	}
	segments := strings.Split(p.source, "/")
	last := segments[len(segments)-1]
	if last != "" && !strings.Contains(last, "**") && !strings.ContainsAny(last, "?[]") {
		n.Name = last
	}
	var dirs []string
	for _, seg := range segments[:len(segments)-1] {
		if seg == "" || strings.ContainsAny(seg, "*?[]") {
			break
		}
		dirs = append(dirs, seg)
	}
	n.Under = strings.Join(dirs, "/")
	return n
}

// ToRipgrep turns a pattern into ripgrep's --glob form, which is anchored at
// the search root: the implicit leading `**/` is made explicit.
func ToRipgrep(pattern string) string {
	if strings.HasPrefix(pattern, "**/") {
		return pattern
	}
	return "**/" + pattern
}
