"""Continuous control under a wall-clock budget (:mod:`.budget`: Ape-X TD3 against SB3
TD3 and SAC, with ours and the peers) and the analyses of its runs (:mod:`.compare`:
who trails whom at equal wall-clock; :mod:`.posture`: which way up a runner ran)."""
