"""kafkalog.cleaner"""
