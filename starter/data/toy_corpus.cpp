// The default corpus: a toy German -> English translation task.
//
// Why a toy task: the original trains on IWSLT14, which a laptop cannot download in a
// grading sandbox and a small model cannot learn in three CPU epochs. This grammar keeps
// what makes translation translation (a lexicon, gender and case agreement, German verb
// placement that English does not share) while staying learnable: the English side is a
// deterministic function of the German side, so the loss can fall far below ln(vocab).
//
// Rules the model has to pick up:
//   - word-by-word lexicon, with German articles and adjective endings chosen by gender,
//     case and number (der/die/das/den/dem, ein/eine/einen, -e/-en/-er/-es);
//   - verb second: an adverb in front moves the German verb before the subject;
//   - verb final: in "dass"/"weil" clauses the German verb goes to the end;
//   - negation: "... nicht" becomes "does not" / "do not" with the bare verb;
//   - agreement: sieht/sehen -> sees/see, ist/sind -> is/are, a/an.
//
// Same seed, same pairs, on every machine: the only randomness is data/splitmix64.h with
// integer arithmetic (std::uniform_int_distribution differs between standard libraries).
#include <string>
#include <unordered_set>
#include <vector>

#include "data/corpus.h"
#include "data/splitmix64.h"
#include "kit/errors.h"

namespace kit {

namespace {

// The grammar's random choices.
class Dice {
 public:
  explicit Dice(uint64_t seed) : rng_(seed) {}
  size_t below(size_t n) { return static_cast<size_t>(rng_.below(n)); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }

 private:
  SplitMix64 rng_;
};

enum Gender { M = 0, F = 1, N = 2 };
enum Case { NOM = 0, ACC = 1, DAT = 2 };

struct Noun {
  Gender g;
  const char *de_sg, *de_pl, *en_sg, *en_pl;
};
struct Verb {
  const char *de_3sg, *de_pl, *en_3sg, *en_base;
};
struct Word {
  const char *de, *en;
};

const std::vector<Noun> kNouns = {
    {M, "Hund", "Hunde", "dog", "dogs"},          {M, "Mann", "Männer", "man", "men"},
    {M, "Vogel", "Vögel", "bird", "birds"},       {M, "Baum", "Bäume", "tree", "trees"},
    {M, "Tisch", "Tische", "table", "tables"},    {M, "Lehrer", "Lehrer", "teacher", "teachers"},
    {M, "Apfel", "Äpfel", "apple", "apples"},     {M, "Ball", "Bälle", "ball", "balls"},
    {M, "König", "Könige", "king", "kings"},      {M, "Fisch", "Fische", "fish", "fish"},
    {M, "Stuhl", "Stühle", "chair", "chairs"},    {M, "Brief", "Briefe", "letter", "letters"},
    {M, "Garten", "Gärten", "garden", "gardens"}, {M, "Koch", "Köche", "cook", "cooks"},
    {F, "Katze", "Katzen", "cat", "cats"},        {F, "Frau", "Frauen", "woman", "women"},
    {F, "Blume", "Blumen", "flower", "flowers"},  {F, "Tür", "Türen", "door", "doors"},
    {F, "Stadt", "Städte", "city", "cities"},     {F, "Maus", "Mäuse", "mouse", "mice"},
    {F, "Lampe", "Lampen", "lamp", "lamps"},      {F, "Schule", "Schulen", "school", "schools"},
    {F, "Tasche", "Taschen", "bag", "bags"},      {F, "Kuh", "Kühe", "cow", "cows"},
    {F, "Straße", "Straßen", "street", "streets"}, {F, "Ärztin", "Ärztinnen", "doctor", "doctors"},
    {N, "Kind", "Kinder", "child", "children"},   {N, "Haus", "Häuser", "house", "houses"},
    {N, "Buch", "Bücher", "book", "books"},       {N, "Pferd", "Pferde", "horse", "horses"},
    {N, "Boot", "Boote", "boat", "boats"},        {N, "Fenster", "Fenster", "window", "windows"},
    {N, "Bild", "Bilder", "picture", "pictures"}, {N, "Schiff", "Schiffe", "ship", "ships"},
    {N, "Ei", "Eier", "egg", "eggs"},             {N, "Mädchen", "Mädchen", "girl", "girls"},
    {N, "Schaf", "Schafe", "sheep", "sheep"},     {N, "Zimmer", "Zimmer", "room", "rooms"},
};

const std::vector<Verb> kTransitive = {
    {"sieht", "sehen", "sees", "see"},         {"findet", "finden", "finds", "find"},
    {"kauft", "kaufen", "buys", "buy"},        {"liebt", "lieben", "loves", "love"},
    {"sucht", "suchen", "seeks", "seek"},      {"trägt", "tragen", "carries", "carry"},
    {"malt", "malen", "paints", "paint"},      {"hört", "hören", "hears", "hear"},
    {"kennt", "kennen", "knows", "know"},      {"hat", "haben", "has", "have"},
    {"braucht", "brauchen", "needs", "need"},  {"holt", "holen", "fetches", "fetch"},
    {"nimmt", "nehmen", "takes", "take"},      {"baut", "bauen", "builds", "build"},
    {"wäscht", "waschen", "washes", "wash"},   {"zeigt", "zeigen", "shows", "show"},
};

const std::vector<Verb> kIntransitive = {
    {"schläft", "schlafen", "sleeps", "sleep"}, {"läuft", "laufen", "runs", "run"},
    {"singt", "singen", "sings", "sing"},       {"wartet", "warten", "waits", "wait"},
    {"spielt", "spielen", "plays", "play"},     {"lacht", "lachen", "laughs", "laugh"},
    {"schwimmt", "schwimmen", "swims", "swim"}, {"arbeitet", "arbeiten", "works", "work"},
};

// Adjective stems; the German endings are added by agreement.
const std::vector<Word> kAdjectives = {
    {"groß", "big"},     {"klein", "small"}, {"alt", "old"},       {"jung", "young"},
    {"neu", "new"},      {"rot", "red"},     {"blau", "blue"},     {"grün", "green"},
    {"schnell", "fast"}, {"langsam", "slow"}, {"müde", "tired"},   {"glücklich", "happy"},
    {"schön", "beautiful"}, {"laut", "loud"}, {"leise", "quiet"},  {"klug", "clever"},
    {"kalt", "cold"},    {"warm", "warm"},   {"hungrig", "hungry"}, {"arm", "poor"},
    {"reich", "rich"},   {"stark", "strong"},
};

const std::vector<Word> kNumbers = {
    {"zwei", "two"},   {"drei", "three"}, {"vier", "four"}, {"fünf", "five"}, {"sechs", "six"},
    {"sieben", "seven"}, {"acht", "eight"}, {"neun", "nine"}, {"zehn", "ten"}, {"viele", "many"},
};

const std::vector<Word> kAdverbs = {
    {"heute", "today"},      {"jetzt", "now"},          {"oft", "often"},   {"manchmal", "sometimes"},
    {"abends", "in the evening"}, {"morgens", "in the morning"}, {"hier", "here"}, {"dort", "there"},
};

const std::vector<Word> kPrepositions = {
    {"in", "in"}, {"mit", "with"}, {"unter", "under"}, {"neben", "next to"}, {"hinter", "behind"},
};

// Clauses that introduce a verb-final "dass" clause.
const std::vector<Word> kReporters = {
    {"ich weiß", "i know"},   {"er sagt", "he says"},     {"sie glaubt", "she believes"},
    {"wir hoffen", "we hope"}, {"du denkst", "you think"}, {"man sagt", "people say"},
};

// A phrase in both languages. German and English word lists are kept separately because
// the two word orders differ.
struct Phrase {
  std::vector<std::string> de, en;
  void add(const Phrase& p) {
    de.insert(de.end(), p.de.begin(), p.de.end());
    en.insert(en.end(), p.en.begin(), p.en.end());
  }
};

// A noun phrase and the number its verb must agree with.
struct NounPhrase {
  Phrase words;
  bool plural = false;
};

const char* definite_article(Gender g, Case c, bool plural) {
  if (plural) return c == DAT ? "den" : "die";
  static const char* table[3][3] = {{"der", "den", "dem"}, {"die", "die", "der"}, {"das", "das", "dem"}};
  return table[g][c];
}

const char* indefinite_article(Gender g, Case c) {
  static const char* table[3][3] = {{"ein", "einen", "einem"}, {"eine", "eine", "einer"}, {"ein", "ein", "einem"}};
  return table[g][c];
}

// Adjective ending after a definite article ("weak" declension).
const char* weak_ending(Gender g, Case c, bool plural) {
  if (plural || c == DAT) return "en";
  if (c == ACC && g == M) return "en";
  return "e";
}

// After an indefinite article ("mixed" declension): the adjective shows the gender.
const char* mixed_ending(Gender g, Case c) {
  if (c == DAT) return "en";
  if (g == M) return c == NOM ? "er" : "en";
  if (g == F) return "e";
  return "es";
}

// Joins words with single spaces, merging English "a" into "an" before a vowel.
std::string join(const std::vector<std::string>& words, bool english) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string w = words[i];
    if (english && w == "a" && i + 1 < words.size() &&
        std::string("aeiou").find(words[i + 1][0]) != std::string::npos)
      w = "an";
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

class ToyGrammar {
 public:
  explicit ToyGrammar(uint64_t seed) : rng_(seed) {}

  TranslationPair sentence() {
    Phrase p;
    switch (rng_.below(10)) {
      case 0: case 1: case 2: case 3: p = main_clause(); break;
      case 4: case 5: p = predicate_clause(); break;
      case 6: case 7: p = reported_clause(); break;
      default: p = because_clause(); break;
    }
    return {finish(p.de, false), finish(p.en, true)};
  }

 private:
  // Sentence case and a final period, in both languages.
  static std::string finish(std::vector<std::string> words, bool english) {
    std::string s = join(words, english);
    if (english) {  // English capitalises "I" everywhere
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == 'i' && (i == 0 || s[i - 1] == ' ') && (i + 1 == s.size() || s[i + 1] == ' ')) s[i] = 'I';
    }
    if (s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');  // ASCII: no locale
    return s + ".";
  }

  NounPhrase noun_phrase(Case c, bool allow_plural) {
    const Noun& n = rng_.pick(kNouns);
    const bool adjective = rng_.chance(35);
    const Word& adj = rng_.pick(kAdjectives);
    NounPhrase np;
    int kind = static_cast<int>(rng_.below(allow_plural ? 4 : 2));
    np.plural = kind >= 2;
    if (kind == 0) {  // der große Hund -> the big dog
      np.words.de.push_back(definite_article(n.g, c, false));
      np.words.en.push_back("the");
      if (adjective) add_adjective(np.words, adj, weak_ending(n.g, c, false));
      np.words.de.push_back(n.de_sg);
      np.words.en.push_back(n.en_sg);
    } else if (kind == 1) {  // ein großer Hund -> a big dog
      np.words.de.push_back(indefinite_article(n.g, c));
      np.words.en.push_back("a");
      if (adjective) add_adjective(np.words, adj, mixed_ending(n.g, c));
      np.words.de.push_back(n.de_sg);
      np.words.en.push_back(n.en_sg);
    } else if (kind == 2) {  // die großen Hunde -> the big dogs
      np.words.de.push_back(definite_article(n.g, c, true));
      np.words.en.push_back("the");
      if (adjective) add_adjective(np.words, adj, weak_ending(n.g, c, true));
      np.words.de.push_back(n.de_pl);
      np.words.en.push_back(n.en_pl);
    } else {  // drei große Hunde -> three big dogs
      const Word& num = rng_.pick(kNumbers);
      np.words.de.push_back(num.de);
      np.words.en.push_back(num.en);
      if (adjective) add_adjective(np.words, adj, "e");
      np.words.de.push_back(n.de_pl);
      np.words.en.push_back(n.en_pl);
    }
    return np;
  }

  static void add_adjective(Phrase& p, const Word& adj, const char* ending) {
    std::string stem = adj.de;
    // "müde", "leise" already end in -e: müde + e -> müde, müde + en -> müden.
    if (!stem.empty() && stem.back() == 'e' && ending[0] == 'e') stem.pop_back();
    p.de.push_back(stem + ending);
    p.en.push_back(adj.en);
  }

  // "im Garten" -> "in the garden", "mit einer Katze" -> "with a cat" (always singular).
  Phrase prepositional_phrase() {
    const Word& prep = rng_.pick(kPrepositions);
    NounPhrase np = noun_phrase(DAT, false);
    Phrase p;
    p.de.push_back(prep.de);
    p.en.push_back(prep.en);
    if (std::string(prep.de) == "in" && np.words.de[0] == "dem") {
      p.de.back() = "im";  // German contracts "in dem"
      np.words.de.erase(np.words.de.begin());
    }
    p.add(np.words);
    return p;
  }

  // The verb's forms, given the subject's number and negation.
  static std::string verb_de(const Verb& v, bool plural) { return plural ? v.de_pl : v.de_3sg; }
  static std::vector<std::string> verb_en(const Verb& v, bool plural, bool negated) {
    if (negated) return {plural ? "do" : "does", "not", v.en_base};  // do-support
    return {plural ? v.en_base : v.en_3sg};
  }
  static void append(std::vector<std::string>& to, const std::vector<std::string>& words) {
    to.insert(to.end(), words.begin(), words.end());
  }

  // [Adv] Subj V [Obj] [PP] [nicht]. With an adverb, German puts the verb second.
  Phrase main_clause() {
    const bool transitive = rng_.chance(60);
    const Verb& v = transitive ? rng_.pick(kTransitive) : rng_.pick(kIntransitive);
    const bool has_adverb = rng_.chance(30);
    const Word& adverb = rng_.pick(kAdverbs);
    const bool negated = rng_.chance(20);
    const bool has_pp = !negated && rng_.chance(35);
    NounPhrase subj = noun_phrase(NOM, true);
    NounPhrase obj = noun_phrase(ACC, true);
    Phrase pp = has_pp ? prepositional_phrase() : Phrase{};

    Phrase p;
    if (has_adverb) {  // German: Adv V Subj ...; English: Adv Subj V ...
      p.de.push_back(adverb.de);
      p.de.push_back(verb_de(v, subj.plural));
      append(p.de, subj.words.de);
      p.en.push_back(adverb.en);
      append(p.en, subj.words.en);
    } else {
      p.add(subj.words);
      p.de.push_back(verb_de(v, subj.plural));
    }
    append(p.en, verb_en(v, subj.plural, negated));
    if (transitive) p.add(obj.words);
    p.add(pp);
    if (negated) p.de.push_back("nicht");
    return p;
  }

  // Subj ist [nicht] Adj -> subj is [not] adj.
  Phrase predicate_clause() {
    NounPhrase subj = noun_phrase(NOM, true);
    const Word& adj = rng_.pick(kAdjectives);
    const bool negated = rng_.chance(25);
    Phrase p = subj.words;
    p.de.push_back(subj.plural ? "sind" : "ist");
    p.en.push_back(subj.plural ? "are" : "is");
    if (negated) {
      p.de.push_back("nicht");
      p.en.push_back("not");
    }
    p.de.push_back(adj.de);
    p.en.push_back(adj.en);
    return p;
  }

  // Subordinate clause: German puts the (negated) verb last, English keeps SVO.
  Phrase subordinate_clause() {
    const bool transitive = rng_.chance(60);
    const Verb& v = transitive ? rng_.pick(kTransitive) : rng_.pick(kIntransitive);
    const bool negated = rng_.chance(15);
    NounPhrase subj = noun_phrase(NOM, true);
    NounPhrase obj = noun_phrase(ACC, true);
    Phrase p = subj.words;
    append(p.en, verb_en(v, subj.plural, negated));
    if (transitive) p.add(obj.words);
    if (negated) p.de.push_back("nicht");
    p.de.push_back(verb_de(v, subj.plural));  // verb last
    return p;
  }

  // "Ich weiß, dass der Hund die Katze sieht." -> "I know that the dog sees the cat."
  Phrase reported_clause() {
    const Word& r = rng_.pick(kReporters);
    Phrase p;
    p.de.push_back(std::string(r.de) + ",");
    p.de.push_back("dass");
    p.en.push_back(r.en);
    p.en.push_back("that");
    p.add(subordinate_clause());
    return p;
  }

  // "Der Hund schläft, weil die Katze singt." -> "The dog sleeps because the cat sings."
  Phrase because_clause() {
    const Verb& v = rng_.pick(kIntransitive);
    NounPhrase subj = noun_phrase(NOM, true);
    Phrase p = subj.words;
    p.de.push_back(verb_de(v, subj.plural) + ",");
    append(p.en, verb_en(v, subj.plural, false));
    p.de.push_back("weil");
    p.en.push_back("because");
    p.add(subordinate_clause());
    return p;
  }

  Dice rng_;
};

size_t word_count(const std::string& s) {
  size_t n = 0;
  bool in_word = false;
  for (char c : s) {
    if (c == ' ') in_word = false;
    else if (!in_word) in_word = true, ++n;
  }
  return n;
}

// Sentences of 4 to 12 German words, no source twice and none from `exclude`, so a
// held-out split really is held out.
std::vector<TranslationPair> generate_unique(int64_t n, uint64_t seed, std::unordered_set<std::string>& exclude) {
  if (n < 0) throw Error("generate_toy_corpus: n = " + std::to_string(n) + " pairs; pass n >= 0");
  ToyGrammar grammar(seed);
  std::vector<TranslationPair> pairs;
  pairs.reserve(static_cast<size_t>(n));
  // The grammar has far more than 10^9 sentences; the cap only turns a bug into an error.
  int64_t misses = 0;
  while (static_cast<int64_t>(pairs.size()) < n) {
    TranslationPair p = grammar.sentence();
    const size_t words = word_count(p.src);
    if (words < 4 || words > 12 || !exclude.insert(p.src).second) {
      if (++misses > 1000 + 100 * n)
        throw Error("generate_toy_corpus: cannot find " + std::to_string(n) + " distinct sentences");
      continue;
    }
    pairs.push_back(std::move(p));
  }
  return pairs;
}

}  // namespace

std::vector<TranslationPair> generate_toy_corpus(int64_t n, uint64_t seed) {
  std::unordered_set<std::string> none;
  return generate_unique(n, seed, none);
}

// Seeds seed, seed + 1, seed + 2 give three independent streams (splitmix64 mixes
// neighbouring seeds thoroughly); no source sentence appears in two splits.
Corpus generate_toy_splits(int64_t n_train, int64_t n_valid, int64_t n_test, uint64_t seed) {
  std::unordered_set<std::string> seen;
  Corpus c;
  c.train = generate_unique(n_train, seed, seen);
  c.valid = generate_unique(n_valid, seed + 1, seen);
  c.test = generate_unique(n_test, seed + 2, seen);
  return c;
}

}  // namespace kit
