"""streamdeid: anonymize faces in video, recover them with a key."""
__version__ = "0.1.0"
