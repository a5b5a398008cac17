package stats

import "strings"

// interner gives each function name a small id, so live blocks need not hold strings that may
// point into a reader's reused buffers.
type interner struct {
	ids   map[string]uint16
	names []string
	last  string
	lastI uint16
}

func newInterner() *interner { return &interner{ids: make(map[string]uint16)} }

func (n *interner) id(s string) uint16 {
	if len(n.names) > 0 && s == n.last {
		return n.lastI
	}
	if len(n.names) <= 8 { // few names: comparing beats hashing
		for i, name := range n.names {
			if name == s {
				n.last, n.lastI = name, uint16(i)
				return uint16(i)
			}
		}
	}
	i, ok := n.ids[s]
	if !ok {
		if len(n.names) == 1<<16-1 {
			return 0
		}
		c := strings.Clone(s)
		i = uint16(len(n.names))
		n.names = append(n.names, c)
		n.ids[c] = i
		s = c
	}
	n.last, n.lastI = n.names[i], i
	return i
}

func (n *interner) name(i uint16) string {
	if int(i) < len(n.names) {
		return n.names[i]
	}
	return ""
}
