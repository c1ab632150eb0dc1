package redact

// matcher finds every one of a set of texts in one pass over a text, in
// time linear in the text (Aho and Corasick, 1975): a trie of the texts
// whose every node also links to the node of its longest proper suffix
// that is in the trie, followed where the trie has no edge for the next
// byte. Node 0 is the root, the empty string; no node is a child of 0 but
// the root's, so 0 also means "none".
type matcher struct {
	root    [256]int32 // the root's children, by byte
	child   []int32    // the first child of each node
	sibling []int32    // the next child of the node's parent
	label   []byte     // the byte of the edge to the node
	fail    []int32    // the node of the longest proper suffix in the trie
	depth   []int32    // the length of the node's string
	match   []int32    // the length of the longest text ending the node's string, or 0
}

func newMatcher(texts []string) matcher {
	size := 1
	for _, t := range texts {
		size += len(t)
	}
	m := matcher{child: make([]int32, 1, size), sibling: make([]int32, 1, size), label: make([]byte, 1, size),
		fail: make([]int32, 1, size), depth: make([]int32, 1, size), match: make([]int32, 1, size)}
	parent := make([]int32, 1, size)
	for _, t := range texts {
		parent = m.insert(t, parent)
	}
	// Links and matches, shallower nodes first: a node's link is found
	// from its parent's, which is shallower, and so is the link's node.
	for _, v := range m.byDepth() {
		if m.depth[v] > 1 { // the root and its children link to the root
			f, _ := m.step(int(m.fail[parent[v]]), m.label[v])
			m.fail[v] = int32(f)
		}
		if m.match[v] == 0 {
			m.match[v] = m.match[m.fail[v]]
		}
	}
	return m
}

// insert adds the nodes of t that the trie lacks, and their parents to
// parent, which it returns.
func (m *matcher) insert(t string, parent []int32) []int32 {
	node := int32(0)
	for i := 0; i < len(t); i++ {
		next, _ := m.edge(node, t[i])
		if next == 0 {
			next = int32(len(m.depth))
			if node == 0 {
				m.root[t[i]] = next
				m.sibling = append(m.sibling, 0)
			} else {
				m.sibling = append(m.sibling, m.child[node])
				m.child[node] = next
			}
			m.child, m.label, parent = append(m.child, 0), append(m.label, t[i]), append(parent, node)
			m.fail, m.depth, m.match = append(m.fail, 0), append(m.depth, m.depth[node]+1), append(m.match, 0)
		}
		node = next
	}
	m.match[node] = m.depth[node]
	return parent
}

// byDepth returns the nodes in order of depth (a counting sort).
func (m *matcher) byDepth() []int32 {
	var count []int32
	for _, d := range m.depth {
		for int(d) >= len(count) {
			count = append(count, 0)
		}
		count[d]++
	}
	start := make([]int32, len(count))
	for d := 1; d < len(count); d++ {
		start[d] = start[d-1] + count[d-1]
	}
	order := make([]int32, len(m.depth))
	for v, d := range m.depth {
		order[start[d]] = int32(v)
		start[d]++
	}
	return order
}

// edge returns the child of node by c, or 0, and the children it looked at.
func (m *matcher) edge(node int32, c byte) (next int32, steps int) {
	if node == 0 {
		return m.root[c], 1
	}
	for ch := m.child[node]; ch != 0; ch = m.sibling[ch] {
		steps++
		if m.label[ch] == c {
			return ch, steps
		}
	}
	return 0, max(steps, 1)
}

// step returns the node after reading c in node, and the children it
// looked at.
func (m *matcher) step(node int, c byte) (next, steps int) {
	for {
		child, n := m.edge(int32(node), c)
		steps += n
		if child != 0 {
			return int(child), steps
		}
		if node == 0 {
			return 0, steps
		}
		node = int(m.fail[node])
	}
}

// inner reports whether node has a child: its string begins a longer text.
func (m *matcher) inner(node int) bool { return node != 0 && (m.child[node] != 0) }
