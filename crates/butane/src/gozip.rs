//! gzip at best compression, byte for byte as Go's `compress/gzip` with the classic
//! `compress/flate` compressor (Go 1.7 to 1.25, BSD-3-Clause) writes it, so that Butane's
//! gzip'd data URLs are reproduced exactly: the same hash chains and lazy matching (level 9:
//! good 32, lazy 258, nice 258, chain 4096), the same Huffman code construction (length-limited
//! by the same level-by-level count), the same block choice (stored, fixed or dynamic,
//! whichever is smallest), and Go's framing (an empty final stored block on close).

const WINDOW: usize = 1 << 15;
const WINDOW_MASK: usize = WINDOW - 1;
const MIN_MATCH: usize = 4;
const MAX_MATCH: usize = 258;
const HASH_BITS: u32 = 17;
const HASH_SIZE: usize = 1 << HASH_BITS;
const MAX_HASH_OFFSET: i64 = 1 << 24;
const MAX_BLOCK_TOKENS: usize = 1 << 14;
const MAX_STORE_BLOCK: usize = 65535;
const GOOD: usize = 32;
const LAZY: usize = 258;
const NICE: usize = 258;
const CHAIN: usize = 4096;

const NUM_LIT: usize = 286;
const NUM_OFF: usize = 30;
const NUM_CODEGEN: usize = 19;
const END_BLOCK: usize = 256;
const BAD_CODE: u8 = 255;

const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const LENGTH_BASE: [u32; 29] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128,
    160, 192, 224, 255,
];
const OFFSET_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
const OFFSET_BASE: [u32; 30] = [
    0x0000, 0x0001, 0x0002, 0x0003, 0x0004, 0x0006, 0x0008, 0x000c, 0x0010, 0x0018, 0x0020, 0x0030,
    0x0040, 0x0060, 0x0080, 0x00c0, 0x0100, 0x0180, 0x0200, 0x0300, 0x0400, 0x0600, 0x0800, 0x0c00,
    0x1000, 0x1800, 0x2000, 0x3000, 0x4000, 0x6000,
];
const CODEGEN_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

#[derive(Clone, Copy)]
enum Token {
    Lit(u8),
    End,
    /// (length - 3, offset - 1)
    Match(u32, u32),
}

/// The DEFLATE length code (0-based, add 257) of `xlength` = length - 3.
fn length_code(xlength: u32) -> usize {
    LENGTH_BASE.iter().rposition(|b| *b <= xlength).unwrap_or(0)
}

/// The DEFLATE distance code of `xoffset` = offset - 1.
fn offset_code(xoffset: u32) -> usize {
    OFFSET_BASE.iter().rposition(|b| *b <= xoffset).unwrap_or(0)
}

fn reverse_bits(code: u16, len: u16) -> u16 {
    code.reverse_bits() >> (16 - len)
}

/// A Huffman code: per symbol its (bit-reversed) code and length.
#[derive(Clone)]
struct Encoder {
    code: Vec<u16>,
    len: Vec<u16>,
}

impl Encoder {
    fn new(n: usize) -> Encoder {
        Encoder {
            code: vec![0; n],
            len: vec![0; n],
        }
    }

    fn fixed_literal() -> Encoder {
        let mut e = Encoder::new(NUM_LIT);
        for ch in 0..NUM_LIT as u16 {
            let (bits, size) = match ch {
                0..=143 => (ch + 48, 8),
                144..=255 => (ch + 400 - 144, 9),
                256..=279 => (ch - 256, 7),
                _ => (ch + 192 - 280, 8),
            };
            e.code[ch as usize] = reverse_bits(bits, size);
            e.len[ch as usize] = size;
        }
        e
    }

    fn fixed_offset() -> Encoder {
        let mut e = Encoder::new(NUM_OFF);
        for i in 0..NUM_OFF {
            e.code[i] = reverse_bits(i as u16, 5);
            e.len[i] = 5;
        }
        e
    }

    fn bit_length(&self, freq: &[i32]) -> i64 {
        freq.iter()
            .enumerate()
            .filter(|(_, f)| **f != 0)
            .map(|(i, f)| *f as i64 * self.len[i] as i64)
            .sum()
    }

    /// The minimum code for `freq` with at most `max_bits` bits per symbol.
    fn generate(&mut self, freq: &[i32], max_bits: i32) {
        let mut list: Vec<(u16, i32)> = Vec::with_capacity(freq.len() + 1);
        for (i, f) in freq.iter().enumerate() {
            if *f != 0 {
                list.push((i as u16, *f));
            } else {
                self.len[i] = 0;
            }
        }
        if list.len() <= 2 {
            for (i, (lit, _)) in list.iter().enumerate() {
                self.code[*lit as usize] = i as u16;
                self.len[*lit as usize] = 1;
            }
            return;
        }
        list.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let counts = bit_counts(&list, max_bits);
        // Assign codes: the `bits` least frequent symbols get the longest codes, in
        // literal order within one length.
        let mut code: u16 = 0;
        let mut rest = list.len();
        for (n, bits) in counts.iter().enumerate() {
            code <<= 1;
            if n == 0 || *bits == 0 {
                continue;
            }
            let bits = *bits as usize;
            let mut chunk: Vec<(u16, i32)> = list[rest - bits..rest].to_vec();
            chunk.sort_by_key(|c| c.0);
            for (lit, _) in chunk {
                self.code[lit as usize] = reverse_bits(code, n as u16);
                self.len[lit as usize] = n as u16;
                code = code.wrapping_add(1);
            }
            rest -= bits;
        }
    }
}

/// How many symbols get each code length (index = bits), for `list` sorted by increasing
/// frequency, lengths limited to `max_bits` (the level-by-level construction Go uses).
fn bit_counts(list: &[(u16, i32)], max_bits: i32) -> Vec<i32> {
    const LIMIT: usize = 16;
    let n = list.len() as i32;
    let freq = |i: i32| -> i32 { if i < n { list[i as usize].1 } else { i32::MAX } };
    let max_bits = max_bits.min(n - 1);
    #[derive(Clone, Copy, Default)]
    struct Level {
        level: i32,
        last_freq: i32,
        next_char_freq: i32,
        next_pair_freq: i32,
        needed: i32,
    }
    let mut levels = [Level::default(); LIMIT];
    let mut leaf_counts = [[0i32; LIMIT]; LIMIT];
    for level in 1..=max_bits {
        let l = level as usize;
        levels[l] = Level {
            level,
            last_freq: freq(1),
            next_char_freq: freq(2),
            next_pair_freq: freq(0) + freq(1),
            needed: 0,
        };
        leaf_counts[l][l] = 2;
        if level == 1 {
            levels[l].next_pair_freq = i32::MAX;
        }
    }
    levels[max_bits as usize].needed = 2 * n - 4;
    let mut level = max_bits as usize;
    loop {
        if levels[level].next_pair_freq == i32::MAX && levels[level].next_char_freq == i32::MAX {
            levels[level].needed = 0;
            levels[level + 1].next_pair_freq = i32::MAX;
            level += 1;
            continue;
        }
        let prev_freq = levels[level].last_freq;
        if levels[level].next_char_freq < levels[level].next_pair_freq {
            let c = leaf_counts[level][level] + 1;
            levels[level].last_freq = levels[level].next_char_freq;
            leaf_counts[level][level] = c;
            levels[level].next_char_freq = freq(c);
        } else {
            levels[level].last_freq = levels[level].next_pair_freq;
            let below = leaf_counts[level - 1];
            leaf_counts[level][..level].copy_from_slice(&below[..level]);
            let lv = levels[level].level as usize;
            levels[lv - 1].needed = 2;
        }
        levels[level].needed -= 1;
        if levels[level].needed == 0 {
            if levels[level].level == max_bits {
                break;
            }
            let lv = levels[level].level as usize;
            levels[lv + 1].next_pair_freq = prev_freq + levels[level].last_freq;
            level += 1;
        } else {
            while levels[level - 1].needed > 0 {
                level -= 1;
            }
        }
    }
    let mut counts = vec![0i32; max_bits as usize + 1];
    let top = &leaf_counts[max_bits as usize];
    for (bits, level) in (1..).zip((1..=max_bits as usize).rev()) {
        counts[bits] = top[level] - top[level - 1];
    }
    counts
}

struct BitWriter {
    out: Vec<u8>,
    bits: u64,
    nbits: u32,
    lit_freq: Vec<i32>,
    off_freq: Vec<i32>,
    codegen: Vec<u8>,
    codegen_freq: [i32; NUM_CODEGEN],
    lit_enc: Encoder,
    off_enc: Encoder,
    codegen_enc: Encoder,
    fixed_lit: Encoder,
    fixed_off: Encoder,
}

impl BitWriter {
    fn new() -> BitWriter {
        BitWriter {
            out: Vec::new(),
            bits: 0,
            nbits: 0,
            lit_freq: vec![0; NUM_LIT],
            off_freq: vec![0; NUM_OFF],
            codegen: vec![0; NUM_LIT + NUM_OFF + 1],
            codegen_freq: [0; NUM_CODEGEN],
            lit_enc: Encoder::new(NUM_LIT),
            off_enc: Encoder::new(NUM_OFF),
            codegen_enc: Encoder::new(NUM_CODEGEN),
            fixed_lit: Encoder::fixed_literal(),
            fixed_off: Encoder::fixed_offset(),
        }
    }

    fn write_bits(&mut self, b: u32, nb: u32) {
        self.bits |= (b as u64) << self.nbits;
        self.nbits += nb;
        while self.nbits >= 8 {
            self.out.push(self.bits as u8);
            self.bits >>= 8;
            self.nbits -= 8;
        }
    }

    fn flush(&mut self) {
        if self.nbits > 0 {
            self.out.push(self.bits as u8);
        }
        self.bits = 0;
        self.nbits = 0;
    }

    fn write_code(&mut self, enc_code: u16, len: u16) {
        self.write_bits(enc_code as u32, len as u32);
    }

    fn write_stored_header(&mut self, length: usize, eof: bool) {
        self.write_bits(eof as u32, 3);
        self.flush();
        self.write_bits(length as u32, 16);
        self.write_bits(!(length as u16) as u32, 16);
    }

    fn index_tokens(&mut self, tokens: &[Token]) -> (usize, usize) {
        self.lit_freq.iter_mut().for_each(|f| *f = 0);
        self.off_freq.iter_mut().for_each(|f| *f = 0);
        for t in tokens {
            match *t {
                Token::Lit(b) => self.lit_freq[b as usize] += 1,
                Token::End => self.lit_freq[END_BLOCK] += 1,
                Token::Match(l, o) => {
                    self.lit_freq[257 + length_code(l)] += 1;
                    self.off_freq[offset_code(o)] += 1;
                }
            }
        }
        let mut num_lit = NUM_LIT;
        while self.lit_freq[num_lit - 1] == 0 {
            num_lit -= 1;
        }
        let mut num_off = NUM_OFF;
        while num_off > 0 && self.off_freq[num_off - 1] == 0 {
            num_off -= 1;
        }
        if num_off == 0 {
            self.off_freq[0] = 1;
            num_off = 1;
        }
        let lf = self.lit_freq.clone();
        self.lit_enc.generate(&lf, 15);
        let of = self.off_freq.clone();
        self.off_enc.generate(&of, 15);
        (num_lit, num_off)
    }

    /// The run-length coded code lengths of both tables (RFC 1951 3.2.7), and their counts.
    fn generate_codegen(&mut self, num_lit: usize, num_off: usize) {
        self.codegen_freq = [0; NUM_CODEGEN];
        let mut sizes: Vec<u8> = Vec::with_capacity(num_lit + num_off + 1);
        sizes.extend(self.lit_enc.len[..num_lit].iter().map(|l| *l as u8));
        sizes.extend(self.off_enc.len[..num_off].iter().map(|l| *l as u8));
        sizes.push(BAD_CODE);
        let cg = &mut self.codegen;
        let freq = &mut self.codegen_freq;
        let mut out = 0;
        let mut size = sizes[0];
        let mut count: i32 = 1;
        let mut i = 1;
        while size != BAD_CODE {
            let next = sizes[i];
            i += 1;
            if next == size {
                count += 1;
                continue;
            }
            if size != 0 {
                cg[out] = size;
                out += 1;
                freq[size as usize] += 1;
                count -= 1;
                while count >= 3 {
                    let n = count.min(6);
                    cg[out] = 16;
                    cg[out + 1] = (n - 3) as u8;
                    out += 2;
                    freq[16] += 1;
                    count -= n;
                }
            } else {
                while count >= 11 {
                    let n = count.min(138);
                    cg[out] = 18;
                    cg[out + 1] = (n - 11) as u8;
                    out += 2;
                    freq[18] += 1;
                    count -= n;
                }
                if count >= 3 {
                    cg[out] = 17;
                    cg[out + 1] = (count - 3) as u8;
                    out += 2;
                    freq[17] += 1;
                    count = 0;
                }
            }
            count -= 1;
            while count >= 0 {
                cg[out] = size;
                out += 1;
                freq[size as usize] += 1;
                count -= 1;
            }
            size = next;
            count = 1;
        }
        cg[out] = BAD_CODE;
    }

    fn dynamic_size(&self, extra: i64) -> (i64, usize) {
        let mut n = NUM_CODEGEN;
        while n > 4 && self.codegen_freq[CODEGEN_ORDER[n - 1]] == 0 {
            n -= 1;
        }
        let header = 3
            + 5
            + 5
            + 4
            + 3 * n as i64
            + self.codegen_enc.bit_length(&self.codegen_freq)
            + self.codegen_freq[16] as i64 * 2
            + self.codegen_freq[17] as i64 * 3
            + self.codegen_freq[18] as i64 * 7;
        let size = header
            + self.lit_enc.bit_length(&self.lit_freq)
            + self.off_enc.bit_length(&self.off_freq)
            + extra;
        (size, n)
    }

    fn write_dynamic_header(&mut self, num_lit: usize, num_off: usize, num_cg: usize, eof: bool) {
        self.write_bits(if eof { 5 } else { 4 }, 3);
        self.write_bits((num_lit - 257) as u32, 5);
        self.write_bits((num_off - 1) as u32, 5);
        self.write_bits((num_cg - 4) as u32, 4);
        for &o in CODEGEN_ORDER.iter().take(num_cg) {
            let l = self.codegen_enc.len[o];
            self.write_bits(l as u32, 3);
        }
        let mut i = 0;
        loop {
            let w = self.codegen[i];
            i += 1;
            if w == BAD_CODE {
                break;
            }
            let (c, l) = (
                self.codegen_enc.code[w as usize],
                self.codegen_enc.len[w as usize],
            );
            self.write_code(c, l);
            let extra = match w {
                16 => 2,
                17 => 3,
                18 => 7,
                _ => 0,
            };
            if extra > 0 {
                let v = self.codegen[i];
                self.write_bits(v as u32, extra);
                i += 1;
            }
        }
    }

    fn write_tokens(&mut self, tokens: &[Token], fixed: bool) {
        for t in tokens {
            let (lit, off) = if fixed {
                (&self.fixed_lit, &self.fixed_off)
            } else {
                (&self.lit_enc, &self.off_enc)
            };
            match *t {
                Token::Lit(b) => {
                    let (c, l) = (lit.code[b as usize], lit.len[b as usize]);
                    self.write_code(c, l);
                }
                Token::End => {
                    let (c, l) = (lit.code[END_BLOCK], lit.len[END_BLOCK]);
                    self.write_code(c, l);
                }
                Token::Match(xl, xo) => {
                    let lc = length_code(xl);
                    let oc = offset_code(xo);
                    let (c, l) = (lit.code[257 + lc], lit.len[257 + lc]);
                    let (oc_code, oc_len) = (off.code[oc], off.len[oc]);
                    self.write_code(c, l);
                    if LENGTH_EXTRA[lc] > 0 {
                        self.write_bits(xl - LENGTH_BASE[lc], LENGTH_EXTRA[lc] as u32);
                    }
                    self.write_code(oc_code, oc_len);
                    if OFFSET_EXTRA[oc] > 0 {
                        self.write_bits(xo - OFFSET_BASE[oc], OFFSET_EXTRA[oc] as u32);
                    }
                }
            }
        }
    }

    /// One block of `tokens`, in the smallest of fixed, dynamic and (when `input` is known
    /// and short enough) stored form.
    fn write_block(&mut self, tokens: &[Token], eof: bool, input: Option<&[u8]>) {
        let mut tokens = tokens.to_vec();
        tokens.push(Token::End);
        let (num_lit, num_off) = self.index_tokens(&tokens);
        let storable = input.is_some_and(|i| i.len() <= MAX_STORE_BLOCK);
        let stored_size = input.map(|i| (i.len() as i64 + 5) * 8).unwrap_or(0);
        let mut extra: i64 = 0;
        if storable {
            for code in 257 + 8..num_lit {
                extra += self.lit_freq[code] as i64 * LENGTH_EXTRA[code - 257] as i64;
            }
            for (f, e) in self.off_freq[..num_off].iter().zip(OFFSET_EXTRA).skip(4) {
                extra += *f as i64 * e as i64;
            }
        }
        let mut size = 3
            + self.fixed_lit.bit_length(&self.lit_freq)
            + self.fixed_off.bit_length(&self.off_freq)
            + extra;
        self.generate_codegen(num_lit, num_off);
        let cf = self.codegen_freq;
        self.codegen_enc.generate(&cf, 7);
        let (dyn_size, num_cg) = self.dynamic_size(extra);
        let mut fixed = true;
        if dyn_size < size {
            size = dyn_size;
            fixed = false;
        }
        if storable && stored_size < size {
            let input = input.unwrap_or_default();
            self.write_stored_header(input.len(), eof);
            self.out.extend_from_slice(input);
            return;
        }
        if fixed {
            self.write_bits(if eof { 3 } else { 2 }, 3);
        } else {
            self.write_dynamic_header(num_lit, num_off, num_cg, eof);
        }
        self.write_tokens(&tokens, fixed);
    }
}

struct Compressor {
    w: BitWriter,
    window: Vec<u8>,
    hash_head: Vec<u32>,
    hash_prev: Vec<u32>,
    hash_offset: i64,
    chain_head: i64,
    index: usize,
    window_end: usize,
    block_start: usize,
    byte_available: bool,
    tokens: Vec<Token>,
    length: usize,
    offset: usize,
    sync: bool,
}

fn hash4(b: &[u8]) -> usize {
    let v = (b[3] as u32) | (b[2] as u32) << 8 | (b[1] as u32) << 16 | (b[0] as u32) << 24;
    (v.wrapping_mul(0x1e35a7bd) >> (32 - HASH_BITS)) as usize
}

impl Compressor {
    fn new() -> Compressor {
        Compressor {
            w: BitWriter::new(),
            window: vec![0; 2 * WINDOW],
            hash_head: vec![0; HASH_SIZE],
            hash_prev: vec![0; WINDOW],
            hash_offset: 1,
            chain_head: -1,
            index: 0,
            window_end: 0,
            block_start: 0,
            byte_available: false,
            tokens: Vec::with_capacity(MAX_BLOCK_TOKENS + 1),
            length: MIN_MATCH - 1,
            offset: 0,
            sync: false,
        }
    }

    fn fill(&mut self, b: &[u8]) -> usize {
        if self.index >= 2 * WINDOW - (MIN_MATCH + MAX_MATCH) {
            self.window.copy_within(WINDOW..2 * WINDOW, 0);
            self.index -= WINDOW;
            self.window_end -= WINDOW;
            self.block_start = if self.block_start >= WINDOW {
                self.block_start - WINDOW
            } else {
                usize::MAX
            };
            self.hash_offset += WINDOW as i64;
            if self.hash_offset > MAX_HASH_OFFSET {
                let delta = self.hash_offset - 1;
                self.hash_offset -= delta;
                self.chain_head -= delta;
                for v in self.hash_prev.iter_mut().chain(self.hash_head.iter_mut()) {
                    *v = if *v as i64 > delta {
                        (*v as i64 - delta) as u32
                    } else {
                        0
                    };
                }
            }
        }
        let n = b.len().min(self.window.len() - self.window_end);
        self.window[self.window_end..self.window_end + n].copy_from_slice(&b[..n]);
        self.window_end += n;
        n
    }

    fn write_block(&mut self, index: usize) {
        if index > 0 {
            let input =
                (self.block_start <= index).then(|| self.window[self.block_start..index].to_vec());
            self.block_start = index;
            let tokens = std::mem::take(&mut self.tokens);
            self.w.write_block(&tokens, false, input.as_deref());
        }
        self.tokens.clear();
    }

    fn find_match(&self, pos: usize, prev_head: i64, lookahead: usize) -> Option<(usize, usize)> {
        let min_look = MAX_MATCH.min(lookahead);
        let win = &self.window[..pos + min_look];
        let nice = (win.len() - pos).min(NICE);
        let mut tries = CHAIN;
        let mut length = MIN_MATCH - 1;
        if length >= GOOD {
            tries >>= 2;
        }
        let mut w_end = win[pos + length];
        let w_pos = &win[pos..];
        let min_index = pos as i64 - WINDOW as i64;
        let mut found = None;
        let mut i = prev_head;
        while tries > 0 {
            spec::work::add(1);
            let iu = i as usize;
            if w_end == win[iu + length] {
                let n = win[iu..iu + min_look]
                    .iter()
                    .zip(&w_pos[..min_look])
                    .take_while(|(a, b)| a == b)
                    .count();
                if n > length && (n > MIN_MATCH || pos - iu <= 4096) {
                    length = n;
                    found = Some((n, pos - iu));
                    if n >= nice {
                        break;
                    }
                    w_end = win[pos + n];
                }
            }
            if i == min_index {
                break;
            }
            i = self.hash_prev[iu & WINDOW_MASK] as i64 - self.hash_offset;
            if i < min_index || i < 0 {
                break;
            }
            tries -= 1;
        }
        found
    }

    fn insert(&mut self, at: usize) {
        let h = hash4(&self.window[at..at + MIN_MATCH]);
        self.hash_prev[at & WINDOW_MASK] = self.hash_head[h];
        self.hash_head[h] = (at as i64 + self.hash_offset) as u32;
    }

    fn deflate(&mut self) {
        if self.window_end - self.index < MIN_MATCH + MAX_MATCH && !self.sync {
            return;
        }
        let max_insert = self.window_end as i64 - (MIN_MATCH as i64 - 1);
        loop {
            spec::work::add(1);
            let lookahead = self.window_end - self.index;
            if lookahead < MIN_MATCH + MAX_MATCH {
                if !self.sync {
                    break;
                }
                if lookahead == 0 {
                    if self.byte_available {
                        let b = self.window[self.index - 1];
                        self.tokens.push(Token::Lit(b));
                        self.byte_available = false;
                    }
                    if !self.tokens.is_empty() {
                        self.write_block(self.index);
                    }
                    break;
                }
            }
            if (self.index as i64) < max_insert {
                let h = hash4(&self.window[self.index..self.index + MIN_MATCH]);
                self.chain_head = self.hash_head[h] as i64;
                self.hash_prev[self.index & WINDOW_MASK] = self.chain_head as u32;
                self.hash_head[h] = (self.index as i64 + self.hash_offset) as u32;
            }
            let prev_length = self.length;
            let prev_offset = self.offset;
            self.length = MIN_MATCH - 1;
            self.offset = 0;
            let min_index = self.index.saturating_sub(WINDOW) as i64;
            if self.chain_head - self.hash_offset >= min_index
                && lookahead > prev_length
                && prev_length < LAZY
                && let Some((l, o)) =
                    self.find_match(self.index, self.chain_head - self.hash_offset, lookahead)
            {
                self.length = l;
                self.offset = o;
            }
            if prev_length >= MIN_MATCH && self.length <= prev_length {
                self.tokens.push(Token::Match(
                    (prev_length - 3) as u32,
                    (prev_offset - 1) as u32,
                ));
                let new_index = self.index + prev_length - 1;
                self.index += 1;
                while self.index < new_index {
                    if (self.index as i64) < max_insert {
                        self.insert(self.index);
                    }
                    self.index += 1;
                }
                self.byte_available = false;
                self.length = MIN_MATCH - 1;
                if self.tokens.len() == MAX_BLOCK_TOKENS {
                    self.write_block(self.index);
                }
            } else {
                if self.byte_available {
                    let i = self.index - 1;
                    self.tokens.push(Token::Lit(self.window[i]));
                    if self.tokens.len() == MAX_BLOCK_TOKENS {
                        self.write_block(i + 1);
                    }
                }
                self.index += 1;
                self.byte_available = true;
            }
        }
    }

    fn write(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            self.deflate();
            let n = self.fill(b);
            b = &b[n..];
        }
    }

    fn close(mut self) -> Vec<u8> {
        self.sync = true;
        self.deflate();
        self.w.write_stored_header(0, true);
        self.w.flush();
        self.w.out
    }
}

/// `gzip.NewWriterLevel(w, gzip.BestCompression)`, one `Write` of `data`, `Close`.
pub fn gzip_best(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 0xff];
    let mut c = Compressor::new();
    c.write(data);
    out.extend(c.close());
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend(crc.sum().to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out
}

/// Decompresses a gzip stream (any writer's) of at most `max` bytes uncompressed; None for
/// a stream that is not gzip or is larger.
pub fn gunzip(data: &[u8], max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(max + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() as u64 <= max).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::gzip_best;

    fn roundtrip(data: &[u8]) {
        let gz = gzip_best(data);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .expect("valid gzip");
        assert_eq!(out, data);
    }

    #[test]
    fn decodes_back() {
        roundtrip(b"");
        roundtrip(b"a");
        roundtrip(b"hello hello hello hello hello hello");
        let text: Vec<u8> = (0..200_000u32)
            .map(|i| {
                b"the quick brown fox jumps over the lazy dog\n"[(i % 44) as usize]
                    ^ ((i / 1000) as u8 & 1)
            })
            .collect();
        roundtrip(&text);
        let noise: Vec<u8> = (0..100_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        roundtrip(&noise);
    }

    #[test]
    fn matches_go() {
        // Go 1.22: gzip.NewWriterLevel(BestCompression), Write("net.bridge..."), Close
        // (from a Butane output of the corpus: wild gonzariosm, /etc/sysctl.d file).
        let data = b"net.bridge.bridge-nf-call-iptables  = 1\nnet.ipv4.ip_forward                 = 1\nnet.bridge.bridge-nf-call-ip6tables = 1";
        let want = "H4sIAAAAAAAC/8pLLdFLKspMSU+FUrp5abrJiTk5upkFJYlJOanFCgq2CoZcIHWZBWUmepkF8Wn5ReWJRSkK6ACmDpd5ZlADbRUMAQEAAP//Y9kzNncAAAA=";
        let got = gzip_best(data);
        let b64 = crate::sugar::base64(&got);
        assert_eq!(b64, want);
    }
}
