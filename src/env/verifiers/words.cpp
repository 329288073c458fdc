// The fixed word list (see words.h).
#include "env/verifiers/words.h"

namespace trellis::env {
namespace {

constexpr std::string_view kWords[] = {
    "able",    "about",   "above",    "across",  "action",  "active",  "actor",    "adapt",
    "admit",   "adult",   "after",    "again",   "agent",   "agree",   "ahead",    "alarm",
    "album",   "alert",   "alive",    "allow",   "alone",   "along",   "alpha",    "amber",
    "angle",   "animal",  "answer",   "apple",   "april",   "arena",   "argue",    "arrow",
    "artist",  "autumn",  "avenue",   "award",   "bacon",   "badge",   "baker",    "balance",
    "banana",  "barrel",  "basket",   "battle",  "beach",   "beacon",  "beauty",   "before",
    "begin",   "below",   "bench",    "berry",   "better",  "beyond",  "bicycle",  "binary",
    "bird",    "bitter",  "blanket",  "blossom", "board",   "bottle",  "branch",   "bread",
    "breeze",  "bridge",  "bright",   "broken",  "brother", "bubble",  "bucket",   "budget",
    "butter",  "button",  "cabin",    "cable",   "camera",  "candle",  "canvas",   "carbon",
    "carpet",  "castle",  "cattle",   "center",  "chair",   "chalk",   "change",   "channel",
    "cheese",  "cherry",  "chess",    "circle",  "city",    "clever",  "cloud",    "coffee",
    "copper",  "corner",  "cotton",   "cousin",  "crystal", "dance",   "danger",   "desert",
    "diamond", "dinner",  "doctor",   "dragon",  "dream",   "driver",  "eagle",    "early",
    "earth",   "echo",    "eleven",   "empire",  "energy",  "engine",  "event",    "fabric",
    "falcon",  "family",  "feather",  "field",   "finger",  "flower",  "forest",   "fountain",
    "frame",   "garden",  "garlic",   "ginger",  "glass",   "golden",  "guitar",   "hammer",
    "harbor",  "harvest", "helmet",   "honey",   "horizon", "island",  "jacket",   "jungle",
    "kettle",  "kitten",  "ladder",   "lemon",   "letter",  "light",   "lizard",   "magnet",
    "mango",   "marble",  "meadow",   "mirror",  "monkey",  "morning", "mountain", "museum",
    "needle",  "number",  "ocean",    "orange",  "orbit",   "packet",  "paper",    "parrot",
    "pencil",  "pepper",  "planet",   "pocket",  "potato",  "puzzle",  "rabbit",   "radio",
    "river",   "rocket",  "saddle",   "salad",   "silver",  "spider",  "spring",   "stone",
    "summer",  "sunset",  "table",    "thunder", "tiger",   "timber",  "tomato",   "travel",
    "tunnel",  "turtle",  "umbrella", "valley",  "velvet",  "violin",  "wagon",    "walnut",
    "window",  "winter",  "wizard",   "yellow",  "zebra",
};

}  // namespace

std::span<const std::string_view> common_words() { return kWords; }

}  // namespace trellis::env
